"""The TPU path from where its users start: `python app.py` on 4 XLA:CPU devices (one trainer
process, SPMD). (The doctor and the CLI interrupted: test_xla_cli.py.)"""
from __future__ import annotations

import os
import time

import pytest

from tests.apphelpers import alive, paused_beat
from tests.xla.xlahelpers import FAST_COMPILE, XLA_TIMEOUT


# ------------------------------------------------------------------------------------------
# The app's own process tree on 4 devices: python app.py -> its fork server -> one trainer process, nothing below it
# ------------------------------------------------------------------------------------------
XLA_FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=16, precision="fp32",
                device="xla-cpu", steps=12, log_every=2, grid_every=6, checkpoint_every=6)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int]:
    import glob
    return [int(c) for path in glob.glob(f"/proc/{pid}/task/*/children") for c in open(path).read().split()]


# The module's app (tests/conftest.py): 4 XLA:CPU devices, and a Stop grace shorter than a first compile.
STOP_GRACE = 2
APP_ENV = {"OMP_NUM_THREADS": "1", "CPU_NUM_DEVICES": "4", "BLINK_STOP_ESCALATE": str(STOP_GRACE), **FAST_COMPILE}


@pytest.fixture(scope="module")
def xla_app(app):
    """The module's app, with the trainer pids its tests saw (none may be left running)."""
    app.seen_pids = set()
    return app


def _wait_status(app, predicate, timeout: float = XLA_TIMEOUT, what: str = "status") -> dict:
    from tests.apphelpers import wait_for

    def check():
        status = app.status()
        return status if predicate(status) else None
    return wait_for(check, timeout, what=what)


def _trainer_of(client, app) -> int:
    """The running run's trainer pid, checked against the real process tree: started by the app,
    driving 4 devices, with no process of its own below it."""
    status = _wait_status(app, lambda s: s.get("pid") and s.get("state") in ("compiling", "running"),
                          what="the trainer to report")
    trainer = status["pid"]
    fork_server = _parent(trainer)   # trainers are forked from the app's fork server (app/supervisor.py)
    assert _parent(fork_server) == app.process.pid and b"forkserver" in open(f"/proc/{fork_server}/cmdline", "rb").read(), \
        "the trainer is not the app's"
    assert status["devices"] == 4 and "one process" in status["layout"], status
    assert [c for c in _children(trainer) if b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()] == []
    app.seen_pids.add(trainer)
    return trainer


def _wait_end(app, timeout: float = 120) -> dict:
    return _wait_status(app, lambda s: s["state"] in ("done", "failed", "stopped"), timeout, what="the run to end")


def _wait_exit(*pids: int) -> None:
    from tests.apphelpers import wait_for
    wait_for(lambda: not any(alive(p) for p in pids), 60, what="the trainer to exit")


def _start_long_run(client, app, min_step: int) -> int:
    """Start a run that would outlast the test; its trainer once it trains past min_step."""
    client.predict(**{**XLA_FORM, "steps": 100000}, key="", api_name="/start")
    trainer = _trainer_of(client, app)
    _wait_status(app, lambda s: s["state"] == "running" and s["step"] >= min_step, what="training")
    return trainer


@pytest.mark.xla
def test_stop_during_a_compile_is_waited_for_not_turned_into_a_kill(xla_app):
    """A compile outlasts the app's Stop grace (STOP_GRACE s here; minutes for a large graph on a
    TPU): the trainer's heartbeat says it is compiling, so the app waits for the step to return,
    and the run stops by request with its checkpoint rather than being killed."""
    from core.rundir import RunDir
    from tests.apphelpers import wait_for
    client = xla_app.client()
    # The 64x64 model: its first graphs take seconds to compile here, as a large one takes minutes on a TPU.
    client.predict(**{**XLA_FORM, "preset": "dcgan64", "steps": 100000}, key="", api_name="/start")
    status = _wait_status(xla_app, lambda s: s.get("pid") and s["state"] == "compiling", what="the first compile")
    xla_app.seen_pids.add(status["pid"])
    run = RunDir(os.path.join(xla_app.runs_root, status["run"]))
    wait_for(lambda: run.read_heartbeat().get("doing") == "compiling", 120, interval=0.05, what="a compile")
    clicked = time.time()
    assert "Stopping" in client.predict(key="", api_name="/stop")
    ended = _wait_end(xla_app, timeout=XLA_TIMEOUT)
    assert ended["state"] == "stopped" and ended["message"].startswith("Stopped by request at step"), ended["message"]
    assert ended["updated"] - clicked > STOP_GRACE   # it outlasted the grace, and was waited for
    assert ended["saved_step"] == ended["step"] >= 1 and os.path.exists(run.file("checkpoint.pt"))
    _wait_exit(status["pid"])


@pytest.mark.xla
@pytest.mark.slow
def test_app_pause_step_resume_then_a_killed_trainer_on_four_devices(xla_app):
    """From the page: Start trains on 4 devices in one process, each holding a quarter of the batch;
    Pause holds the step count, "10 steps" trains exactly ten with the grid before and after and no
    new compilation, Resume trains on in the same trainer. Then the trainer is killed: the run fails
    plainly, keeps its checkpoint, and nothing is left running once the app stops. (Stop by request
    on 4 devices, with the checkpoint of the step it stopped at: the compile test above.)"""
    import signal
    from tests.apphelpers import wait_for
    client = xla_app.client()
    trainer = _start_long_run(client, xla_app, min_step=4)
    status = xla_app.status()
    assert status["device"] == "XLA:CPU (4 devices)" and status["diagnostics"]["fallback_ops"] == []
    assert status["diagnostics"]["batch_shards"] == [[4, 1, 28, 28]] * 4
    assert "Paus" in client.predict(key="", api_name="/pause")
    paused = _wait_status(xla_app, lambda s: s["state"] == "paused", timeout=60, what="the pause")
    beat = paused_beat(os.path.join(xla_app.runs_root, paused["run"]))
    assert beat["step"] == paused["step"], beat
    assert xla_app.status()["step"] == paused["step"], "steps ran while paused"
    # Step while paused: exactly ten updates on the 4 devices, the grid before and after, no new graph.
    assert "Stepping 10 generator updates" in client.predict(key="", api_name="/step_10")
    stepped = _wait_status(xla_app, lambda s: s["state"] == "paused" and s["stepped_from"] == paused["step"],
                           timeout=60, what="ten steps")
    assert stepped["step"] == paused["step"] + 10
    grids = os.listdir(os.path.join(xla_app.runs_root, stepped["run"], "grids"))
    assert {f"step_{paused['step']:06d}.png", f"step_{stepped['step']:06d}.png"} <= set(grids)
    assert stepped["diagnostics"]["compiles"] == paused["diagnostics"]["compiles"]
    paused = stepped
    assert "Resum" in client.predict(resume_steps=0, key="", api_name="/resume")
    _wait_status(xla_app, lambda s: s["state"] == "running" and s["step"] > paused["step"] and s["saved_step"] >= 6,
                 timeout=60, what="training to go on after Resume, past a checkpoint")
    assert xla_app.status()["pid"] == trainer      # the same trainer, not a new one

    os.kill(trainer, signal.SIGKILL)
    status = _wait_end(xla_app)
    assert status["state"] == "failed", status
    assert "killed (SIGKILL)" in status["message"] and "is kept" in status["message"], status["message"]
    assert os.path.exists(os.path.join(xla_app.runs_root, status["run"], "checkpoint.pt"))
    _wait_exit(trainer)
    assert xla_app.stop() is not None
    wait_for(lambda: not [p for p in xla_app.seen_pids if alive(p)], 60, what="every process to exit")
