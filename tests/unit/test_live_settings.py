"""Settings the host changes while a run trains (issue 41): the learning rates, Adam's betas and
D's updates per G update, from the next step on, written to the run's events and to its plan, and
kept when the run is resumed; and a Step of D or G alone. (Through the page's named API:
tests/app/test_app.py; on the page: tests/browser/test_browser.py.)"""
import os

import pytest
import torch

from core import train
from core.config import ConfigError, TrainConfig
from tests.filehelpers import cpu_plan
from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import wait_for
from tests.clihelpers import start_cli

CHANGE = {"lr_d": 1e-3, "beta1": 0.3, "n_critic": 2}


def _changes(run: RunDir) -> list[dict]:
    return [event for event in run.read_events()[0] if "settings" in event]


def _optimizer_settings(run: RunDir) -> dict:
    state = torch.load(run.file("checkpoint.pt"), map_location="cpu", weights_only=False)
    return {net: [(group["lr"], tuple(group["betas"])) for group in state[net]["param_groups"]]
            for net in ("opt_g", "opt_d")}


@pytest.fixture(scope="module")
def changed_run(tmp_path_factory) -> tuple[RunDir, TrainConfig]:
    """A CLI run changed mid-run through its run directory (as the app asks), then stopped."""
    run = RunDir(str(tmp_path_factory.mktemp("live") / "run"))
    process = start_cli(["-m", "core.train", "--device", "cpu", "--preset", "fast",
                         "--batch-size", "16", "--steps", "100000", "--log-every", "5",
                         "--checkpoint-every", "10", "--quality-every", "0", "--run-dir", run.path],
                        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        wait_for(lambda: run.read_status().step >= 5, 120, interval=0.1, what="training")
        before = run.read_config()
        run.change_settings(CHANGE)
        wait_for(lambda: _changes(run) and run.read_status().saved_step > _changes(run)[0]["step"],
                 60, interval=0.1, what="the change and a checkpoint after it")
        run.request("stop")
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    return run, before


def test_a_change_takes_effect_in_the_optimizers_the_events_and_the_plan(changed_run):
    run, before = changed_run
    (event,) = _changes(run)
    assert event["settings"] == CHANGE, event
    after = run.read_config()
    assert (after.lr_d, after.beta1, after.n_critic) == (1e-3, 0.3, 2)
    assert (after.lr_g, after.beta2) == (before.lr_g, before.beta2)   # only what was asked changes
    # The optimizers trained with the change: the checkpoint's learning rates and betas.
    assert _optimizer_settings(run) == {"opt_g": [(before.lr_g, (0.3, before.beta2))],
                                        "opt_d": [(1e-3, (0.3, before.beta2))]}
    assert not os.path.exists(run.file("settings.json"))   # taken once, never applied again


def test_a_resumed_run_trains_on_with_the_changed_settings(changed_run):
    run, _ = changed_run
    saved = run.read_status().saved_step
    assert train.main(["--resume", run.path, "--steps", str(saved + 3)]) == 0
    assert run.read_status().state in FINAL_STATES and run.read_status().step == saved + 3
    resumed = run.read_config()
    assert (resumed.lr_d, resumed.beta1, resumed.n_critic) == (1e-3, 0.3, 2)
    # The rates decay over the resumed run's new length, both by one factor: D's is still the changed one.
    (lr_g, betas_g), (lr_d, betas_d) = (_optimizer_settings(run)[net][0] for net in ("opt_g", "opt_d"))
    assert lr_d / lr_g == pytest.approx(1e-3 / resumed.lr_g) and betas_g == betas_d == (0.3, resumed.beta2)


@pytest.mark.parametrize("values, message", [
    ({"lr_d": 5.0}, "lr_d 5.0 is out of range"),
    ({"beta2": 1.0}, "beta2 1.0 must be in [0, 0.9999]"),
    ({"beta1": 0.9999999999999999}, "beta1 0.9999999999999999 must be in [0, 0.9999]"),   # 1 in float32
    ({"n_critic": 0}, "between 1 and 20"),
    ({"batch_size": 8}, "batch_size cannot change while a run trains; these can: lr_g, lr_d, beta1, beta2, n_critic."),
])
def test_a_change_the_config_refuses_names_the_field(values, message):
    plan = cpu_plan(gan="dcgan", preset="fast")
    with pytest.raises(ConfigError) as refused:
        plan.changed(10, values)
    assert message in str(refused.value)


def test_changes_asked_before_the_trainer_looks_join_the_newer_value_winning(tmp_path):
    """Two presses within the trainer's look (about half a second apart on the page): both are taken,
    a field asked twice at its newer value; the trainer takes the file once."""
    from core.control import Control
    run = RunDir(str(tmp_path))
    control = Control(run)
    run.change_settings({"lr_d": 1e-3, "beta1": 0.3})
    run.change_settings({"lr_d": 2e-3, "lr_g": 4e-4})
    assert control.request_waiting()
    assert control.settings() == {"lr_d": 2e-3, "beta1": 0.3, "lr_g": 4e-4} and control.settings() == {}


def test_the_page_names_every_field_that_may_change_and_no_other():
    from app.views import LIVE_LABELS
    from core.config import LIVE_FIELDS
    assert tuple(LIVE_LABELS) == LIVE_FIELDS


@pytest.mark.parametrize("gan, updates, d_moves, g_moves", [
    ("dcgan", "both", True, True), ("dcgan", "d", True, False), ("dcgan", "g", False, True),
    ("wgan-gp", "d", True, False), ("wgan-gp", "g", False, True),   # the penalty's double backward, in both
])
def test_a_step_of_one_net_alone_updates_that_net_only(gan, updates, d_moves, g_moves):
    """The host's Step with "D alone" or "G alone": the other net (and G's average) stays as it
    was; both nets' losses are still there for the charts."""
    from core import devices
    from core.plan import plan_run
    from core.training import build_training
    training = build_training(plan_run(TrainConfig(gan=gan, steps=10, batch_size=16, preset="fast", device="cpu",
                                                   ema=0.9), devices.probe("cpu")))
    training.step()   # the optimizers' state exists from here on, as in a paused run

    def weights():
        return [p.detach().clone() for net in (training.D, training.G, training.G_sampled) for p in net.parameters()]
    before = weights()
    tensors = training.step(updates=updates)
    after = weights()
    count = len(list(training.D.parameters()))
    moved_d = any(not torch.equal(a, b) for a, b in zip(before[:count], after[:count]))
    moved_g = any(not torch.equal(a, b) for a, b in zip(before[count:], after[count:]))
    assert (moved_d, moved_g) == (d_moves, g_moves)
    assert torch.isfinite(tensors["loss_d"]) and torch.isfinite(tensors["loss_g"])
    assert training.step_count == 2
