"""Step by step: a paused run advances exactly the generator updates asked for, with the grid and
D's verdicts before and after, and stays paused (the lesson's "watch one update change the fakes")."""
import json
import os

import pytest

from core.rundir import RunDir
from tests.apphelpers import RunningApp, press_start, wait_for

pytestmark = pytest.mark.slow

FORM = ("bundled-mnist", "", "dcgan", "fast", 16, "fp32", "cpu", 100000)


def test_step_and_ten_steps_while_paused_train_exactly_that_and_show_before_and_after(tmp_path):
    (tmp_path / "runs").mkdir()
    app = RunningApp(str(tmp_path / "runs"), env={"OMP_NUM_THREADS": "1"}).wait_ready()
    try:
        client = app.client()

        def status():
            return client.predict(api_name="/status")

        assert client.predict(api_name="/step") == "No run is training."
        press_start(client, *FORM, log_every=5)
        wait_for(lambda: status()["state"] == "running" and status()["step"] >= 5, 120, what="the run")
        assert "Pause first" in client.predict(api_name="/step")   # a running run is not stepped
        client.predict(api_name="/pause")
        paused = wait_for(lambda: (s := status())["state"] == "paused" and s, 60, what="the pause")
        run = RunDir(os.path.join(str(tmp_path / "runs"), paused["run"]))

        for press, count in (("/step", 1), ("/step_10", 10)):
            before = status()
            assert "Stepping" in client.predict(api_name=press)
            after = wait_for(lambda: (s := status())["message"].startswith(f"Paused at step {before['step'] + count}:")
                             and s, 60, what=f"{press}")
            assert after["state"] == "paused" and after["step"] == before["step"] + count
            assert after["stepped_from"] == before["step"]
            # The grid and D's verdicts before the step and after it, for the page to show side by side.
            for step in (before["step"], after["step"]):
                assert run.has_grid(step) and len(run.read_verdicts(step)["fake"]) == 60
        with open(run.file("events.jsonl")) as f:
            logged = [e["step"] for e in map(json.loads, f) if "loss_d" in e]
        stepped = range(paused["step"] + 1, paused["step"] + 12)
        assert all(step in logged for step in stepped)   # every stepped update is on the curve
        assert logged == sorted(set(logged))

        # Still paused: nothing trains until Resume, which carries on from the stepped step.
        assert status()["step"] == paused["step"] + 11
        client.predict(api_name="/resume")
        wait_for(lambda: status()["state"] == "running" and status()["step"] > paused["step"] + 11, 60,
                 what="the resumed run")
        client.predict(api_name="/stop")
        wait_for(lambda: status()["state"] == "stopped", 60, what="the stop")
    finally:
        app.stop()
