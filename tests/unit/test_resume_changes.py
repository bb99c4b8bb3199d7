"""A run the host changed after its last checkpoint still resumes (issue 66), through the real CLI
trainer: it goes on from the checkpoint with the settings the checkpoint was trained with, and the
change takes effect again at the step it took effect at; unless the run diverged after the change,
which is then dropped, in words. (From the page, Resume reaches the same policy: core/resume.py.)"""
from __future__ import annotations

import os
import shutil
import signal

import pytest
import torch

from core import train
from core.rundir import RunDir
from tests.apphelpers import wait_for
from tests.clihelpers import run_cli, start_cli

# No checkpoint but the one a run ends with: a change after it stays after it, whatever this machine's speed.
ARGS = ["--device", "cpu", "--preset", "fast", "--batch-size", "16", "--log-every", "5", "--grid-every", "1000",
        "--checkpoint-every", "100000", "--quality-every", "0"]
CHECKPOINT = 8
CHANGE = {"lr_d": 1e-3}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _changes(run: RunDir) -> list[tuple[int, dict]]:
    return [(event["step"], event["settings"]) for event in run.read_events()[0] if "settings" in event]


def _rates_ratio(run: RunDir) -> float:
    """D's learning rate over G's in the checkpoint's optimizers (both decay by one factor)."""
    state = torch.load(run.file("checkpoint.pt"), map_location="cpu", weights_only=False)
    return state["opt_d"]["param_groups"][0]["lr"] / state["opt_g"]["param_groups"][0]["lr"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> str:
    """A run done at step CHECKPOINT, its checkpoint saved at its end."""
    path = str(tmp_path_factory.mktemp("finished") / "run")
    assert train.main([*ARGS, "--steps", str(CHECKPOINT), "--run-dir", path]) == 0
    return path


def _changed_after_the_checkpoint(finished: str, tmp_path, script: str = "-m core.train", **env: str):
    """A copy of the finished run resumed by `script`, with the host's change asked before its first
    step (so it takes effect after step CHECKPOINT + 1): (the run, its process)."""
    run = RunDir(shutil.copytree(finished, str(tmp_path / "run")))
    original = run.read_config().lr_d
    run.change_settings(CHANGE)
    process = start_cli([*script.split(), "--resume", run.path, "--steps", "100000"], env={**ENV, **env})
    return run, original, process


def test_a_change_after_the_checkpoint_then_a_kill_resumes_and_takes_effect_again(finished, tmp_path):
    run, original, process = _changed_after_the_checkpoint(finished, tmp_path)
    try:
        wait_for(lambda: _changes(run), 120, interval=0.05, what="the change")
        os.kill(process.pid, signal.SIGKILL)   # a trainer lost: its plan holds the change, its checkpoint not
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    assert _changes(run) == [(CHECKPOINT + 1, CHANGE)] and run.read_status().saved_step == CHECKPOINT
    assert train.main(["--resume", run.path, "--steps", str(CHECKPOINT + 6)]) == 0
    assert run.read_status().state == "done" and run.read_status().step == CHECKPOINT + 6
    # The same change, at the same step, once: the charts' mark, the plan's history, the optimizer.
    assert _changes(run) == [(CHECKPOINT + 1, CHANGE)]
    plan = run.read_plan()
    assert plan.changes == ({"step": CHECKPOINT + 1, "settings": CHANGE, "before": {"lr_d": original}},)
    assert plan.config.lr_d == CHANGE["lr_d"] and _rates_ratio(run) == pytest.approx(CHANGE["lr_d"] / plan.config.lr_g)


def test_a_run_that_diverged_after_a_change_resumes_with_the_settings_before_it(finished, tmp_path):
    run, original, process = _changed_after_the_checkpoint(
        finished, tmp_path, script=os.path.join("tests", "fault_scripts", "nan_train.py"),
        BLINK_FAULT_NAN_AT_STEP=str(CHECKPOINT + 3))
    try:
        assert process.wait(120) == 1
    finally:
        if process.poll() is None:
            process.kill()
    diverged = run.read_status()
    assert diverged.state == "failed" and diverged.message.startswith("Training diverged at step"), diverged.message
    assert _changes(run) == [(CHECKPOINT + 1, CHANGE)]
    resumed = run_cli(["-m", "core.train", "--resume", run.path, "--steps", str(CHECKPOINT + 6)], env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (f"It goes on from step {CHECKPOINT} with the settings of that checkpoint: the run diverged after the "
            f"change at step {CHECKPOINT + 1} (lr_d 0.001), so that change is dropped.") in resumed.stdout
    assert run.read_status().state == "done" and _changes(run) == []
    plan = run.read_plan()
    assert plan.changes == () and plan.config.lr_d == original
    assert _rates_ratio(run) == pytest.approx(original / plan.config.lr_g)
