"""Training in chunks (app/chunks.py), the road a ZeroGPU Space takes, run on the CPU with
BLINK_CHUNK_SECONDS: each chunk a trainer of its own that continues the run from its checkpoint.
What only ZeroGPU does (its queue, refusals, tokens, a worker kept between calls, an aborted call)
is tested through the real `spaces` package in tests/zerogpu/."""
import json
import os
import signal
import time

import pytest
import torch

from tests.apphelpers import RunningApp, alive, press_start, wait_for
from tests.clihelpers import run_cli

pytestmark = pytest.mark.slow

CHUNK_SECONDS = 1.5
STEPS = 160
FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=16, precision="fp32",
            device="cpu", steps=STEPS)
OPTIONS = {"log_every": 5, "checkpoint_every": 1000, "grid_every": 40}
# One thread in both runs: CPU kernels split over threads round differently, which a GAN amplifies.
ENV = {"OMP_NUM_THREADS": "1", "BLINK_CHUNK_SECONDS": str(CHUNK_SECONDS)}


def _weights(path: str) -> dict:
    state = torch.load(os.path.join(path, "checkpoint.pt"), map_location="cpu", weights_only=False)
    return {"step": state["step"], **{f"{net}.{name}": value for net in ("G", "D", "G_ema")
                                      for name, value in state[net].items()}}


def _unbroken_run(chunked_run: str, run_dir: str) -> dict:
    """The same config (the chunked run's plan: the config it trained with) trained in one piece by the CLI."""
    from core.rundir import RunDir
    from core.train import cli_flags
    run_cli(["-m", "core.train", *cli_flags(RunDir(chunked_run).read_config()), "--run-dir", run_dir], check=True,
            timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _weights(run_dir)


def test_a_run_in_chunks_from_the_page_pauses_survives_a_kill_and_equals_an_unbroken_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    app = RunningApp(str(runs), env=ENV).wait_ready()
    seen = []   # every status a viewer polling /status saw
    try:
        client = app.client()

        def status():
            seen.append(app.status())
            return seen[-1]

        press_start(client, **FORM, **OPTIONS)
        # Two chunks ended: the next one is a new trainer that continued from the checkpoint.
        wait_for(lambda: status()["chunk"] >= 3, timeout=120, interval=0.1, what="the third chunk")
        pids = {s["pid"] for s in seen if s["pid"] and s["chunk"]}
        assert len(pids) >= 3, pids   # one trainer per chunk
        run_dir = os.path.join(str(runs), seen[-1]["run"])

        # Pause: the chunk ends with a checkpoint and gives its trainer (its GPU) back until Resume.
        assert "Pausing" in client.predict(api_name="/pause")
        paused = wait_for(lambda: (s := status())["state"] == "paused" and s, timeout=60, interval=0.1,
                          what="the pause")
        wait_for(lambda: not alive(paused["pid"]), timeout=30, what="the paused chunk's trainer to end")
        assert paused["saved_step"] == paused["step"]
        assert status()["step"] == paused["step"]   # nothing trains while paused: the chunk's trainer has ended
        assert "Resuming" in client.predict(api_name="/resume")
        wait_for(lambda: (s := status())["state"] == "running" and s["step"] > paused["step"], timeout=60,
                 interval=0.1, what="the resumed run")

        # No gap for a viewer: from the first step on, the run only ever read as training or paused,
        # and its step never went back.
        first = next(i for i, s in enumerate(seen) if s["step"] > 0)
        assert {s["state"] for s in seen[first:]} <= {"running", "paused"}, {s["state"] for s in seen[first:]}
        steps_seen = [s["step"] for s in seen]
        assert steps_seen == sorted(steps_seen)

        # A chunk's trainer killed: the run fails plainly, keeping the checkpoint the last chunk ended on
        # (the run saves only at chunk ends: its checkpoint interval is longer than the run).
        victim = wait_for(lambda: (s := status())["state"] == "running" and s["step"] > s["saved_step"] > 0
                          and s["pid"] and s, timeout=60, interval=0.05, what="a chunk training")
        os.kill(victim["pid"], signal.SIGKILL)
        failed = wait_for(lambda: (s := status())["state"] == "failed" and s, timeout=60, what="the failure")
        assert "ended unexpectedly" in failed["message"] and "SIGKILL" in failed["message"], failed["message"]
        assert failed["saved_step"] >= victim["saved_step"]   # at most the chunk it was training is lost

        # Resume goes on in chunks to the end.
        assert "Resuming" in client.predict(resume_steps=0, api_name="/resume")
        done = wait_for(lambda: (s := status())["state"] == "done" and s, timeout=240, what="the end of the run")
        assert done["step"] == STEPS and done["chunk"] >= 5, done
    finally:
        app.stop()

    # Every logged step once, in order: no step lost or repeated across chunks, the pause and the kill.
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        logged = [e["step"] for e in map(json.loads, f) if "loss_d" in e]
    assert logged == sorted(set(logged)) and logged[-1] == STEPS
    assert set(range(OPTIONS["log_every"], STEPS + 1, OPTIONS["log_every"])) <= set(logged)

    # Each chunk continued the random state too, so the weights are an unbroken run's, exactly.
    chunked = _weights(run_dir)
    unbroken = _unbroken_run(run_dir, str(tmp_path / "unbroken"))
    assert chunked.keys() == unbroken.keys()
    assert chunked["step"] == unbroken["step"] == STEPS
    different = [name for name in chunked if name != "step" and not torch.equal(chunked[name], unbroken[name])]
    assert not different, different
