"""Stop, then Pause a moment later, through the real app (issue 45): the Stop is kept, so every run
ends "stopped" by request with its last step saved, never paused and then killed by the Stop
watchdog. The rules themselves: tests/unit/test_requests.py."""
import os
import time

import pytest

from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import RunningApp, press_start, wait_for

pytestmark = pytest.mark.slow

FORM = ("bundled-mnist", "", "dcgan", "fast", 16, "fp32", "cpu", 100000)
TRIES = 5
# A Stop heard takes a second or two here; the watchdog's "by force" comes after 20 s (BLINK_STOP_ESCALATE).
END_SECONDS = 30


def test_a_pause_pressed_just_after_stop_never_replaces_it(tmp_path):
    (tmp_path / "runs").mkdir()
    app = RunningApp(str(tmp_path / "runs"), env={"OMP_NUM_THREADS": "1"}).wait_ready()
    try:
        # A client each for the presses and the watching: one client's events share one stream,
        # which gradio_client can lose when the server closes it between two of them.
        client, pauser, watcher = app.client(), app.client(), app.client()

        def status():
            return watcher.predict(api_name="/status")

        def ended(timeout):
            """The run's status once it has ended, else (after `timeout` s) the last one seen."""
            deadline = time.time() + timeout
            while (s := status())["state"] not in FINAL_STATES and time.time() < deadline:
                time.sleep(0.1)
            return s

        outcomes = []
        for _ in range(TRIES):   # one app, a new run each time
            press_start(client, *FORM, log_every=5, checkpoint_every=5)
            # Past the trainer's warm-up steps: the watchdog then times its step (core/heartbeat.py).
            running = wait_for(lambda: (s := status())["state"] == "running" and s["step"] >= 5 and s, 120,
                               interval=0.1, what="the run")
            run = RunDir(os.path.join(app.runs_root, running["run"]))
            stop = client.submit(api_name="/stop")
            # Pause the moment the Stop is written (watched in the run directory, not waiting for the
            # Stop's answer to come back), so it lands before the trainer has heard the Stop.
            wait_for(lambda: run.read_request() == "stop" or stop.done(), 10, interval=0.002, what="the Stop")
            stopped_at = time.perf_counter()
            answer = pauser.predict(api_name="/pause")
            late = time.perf_counter() - stopped_at   # the Pause's round trip: it landed within this
            assert "Stopping" in stop.result()
            final = ended(END_SECONDS)
            outcomes.append((round(late, 3), answer, final["state"], final["message"], final["step"],
                             final["saved_step"]))
            if final["state"] not in FINAL_STATES:   # the Pause won (the bug): end this run for the next try
                client.predict(api_name="/stop")
                wait_for(lambda: ended(0)["state"] in FINAL_STATES, 60, what="the run to stop")
        said = "\n".join(f"Pause answered {o[0]:.2f} s after the Stop: {o[1]!r}; the run: {o[2]}, {o[3]!r}, "
                          f"step {o[4]}, saved {o[5]}" for o in outcomes)
        for late, answer, state, message, step, saved_step in outcomes:
            assert state == "stopped" and message == f"Stopped by request at step {step}.", said
            assert saved_step == step > 0, said
            # The Pause was answered in words: a Stop is pending (or the run had already ended).
            assert answer in ("Stopping already: Pause comes too late.", "No run is training."), said
        # The race was run: Pauses landed while the Stop was pending.
        assert any(answer.startswith("Stopping already") for _, answer, *_ in outcomes), said
    finally:
        app.stop()
