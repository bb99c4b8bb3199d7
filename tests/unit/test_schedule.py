"""The learning rates' schedule (config.lr_decay_start, core/training.py lr_factor): constant, then
falling linearly toward 0 over the run's last part; a real CLI run's optimizers carry it, and a
resumed run takes it up from its step and its new length."""
import os
import subprocess
import sys

import pytest
import torch

from core import devices, train
from core.config import TrainConfig
from core.plan import plan_run
from core.resume import prepare_resume
from core.rundir import RunDir
from core.training import build_training, lr_factor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DEFAULTS = plan_run(TrainConfig(), devices.probe("cpu")).config   # the CPU's default type and fast preset: what these CLI runs train at
RATES = (_DEFAULTS.lr_g, _DEFAULTS.lr_d)
SMALL_RUN = ["--batch-size", "8", "--device", "cpu", "--quality-every", "0", "--grid-every", "1000"]


def scaled(factor: float) -> tuple[float, float]:
    """(G's, D's) default learning rate times the schedule's factor."""
    return tuple(rate * factor for rate in RATES)


def _rates(run_path) -> tuple[float, float]:
    """(G's, D's) learning rate in the run's checkpoint: what its last update used."""
    state = torch.load(run_path / "checkpoint.pt", weights_only=False)
    return state["opt_g"]["param_groups"][0]["lr"], state["opt_d"]["param_groups"][0]["lr"]


def test_the_factor_is_one_until_the_decay_starts_then_falls_linearly_and_never_reaches_zero():
    factors = [lr_factor(step, 10, 0.5) for step in range(10)]
    assert factors == pytest.approx([1, 1, 1, 1, 1, 1.0, 0.8, 0.6, 0.4, 0.2])
    assert all(lr_factor(step, 2000, 0.5) == 1.0 for step in range(1000))
    assert lr_factor(1999, 2000, 0.5) == pytest.approx(1 / 1000)
    assert all(lr_factor(step, 50, 1.0) == 1.0 for step in range(50))   # 1: constant
    assert min(lr_factor(step, 7, 0.0) for step in range(7)) > 0


def test_the_decay_is_on_for_dcgans_fast_preset_only_and_a_chosen_value_wins():
    assert TrainConfig().resolved("fast").lr_decay_start == 0.5
    assert TrainConfig().resolved("dcgan64").lr_decay_start == 1.0
    assert TrainConfig(gan="hinge").resolved("fast").lr_decay_start == 1.0
    assert TrainConfig(lr_decay_start=1.0).resolved("fast").lr_decay_start == 1.0
    assert TrainConfig(gan="wgan-gp", lr_decay_start=0.8).resolved("fast").lr_decay_start == 0.8


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_cli_refuses_a_start_outside_the_run_before_training(tmp_path, value):
    result = subprocess.run([sys.executable, "-m", "core.train", "--lr-decay-start", value,
                             "--run-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"lr_decay_start {float(value)} is out of range; use a share of the run in [0, 1]" in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_run_decays_both_rates_and_a_resume_follows_its_step_and_new_length(tmp_path):
    run_path = tmp_path / "run"
    assert train.main(["--steps", "10", *SMALL_RUN, "--run-dir", str(run_path)]) == 0   # fast preset: decay from halfway
    assert _rates(run_path) == pytest.approx(scaled(1 / 5))       # update 10 of 10: (10 - 9) / (10 - 5)
    assert train.main(["--resume", str(run_path), "--steps", "40"]) == 0  # the decay now starts at step 20
    assert _rates(run_path) == pytest.approx(scaled(1 / 20))
    constant = tmp_path / "constant"
    assert train.main(["--steps", "10", *SMALL_RUN, "--lr-decay-start", "1", "--run-dir", str(constant)]) == 0
    assert _rates(constant) == pytest.approx(RATES)


def test_the_first_step_after_a_resume_sets_the_rates_the_checkpoint_brought(tmp_path):
    """A 10-step run saved at a fifth of the rate, resumed to 40 steps: updates 11-20 come before
    the new decay, so they run at the full rate, not at the rate the optimizer state brought."""
    run_path = tmp_path / "run"
    assert train.main(["--steps", "10", *SMALL_RUN, "--run-dir", str(run_path)]) == 0
    run = RunDir(str(run_path))
    training = build_training(prepare_resume(run, 40, {}, devices.probe)[0])
    training.load_checkpoint_state(run.load_checkpoint())
    assert training.opt_g.param_groups[0]["lr"] == pytest.approx(scaled(1 / 5)[0])   # as the checkpoint brought it
    training.step()
    assert tuple(o.param_groups[0]["lr"] for o in (training.opt_g, training.opt_d)) == pytest.approx(RATES)
