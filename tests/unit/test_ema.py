"""Sampling from an exponential moving average of G's weights (core/ema.py, config.ema): the
trainer's grids, quality meter and generator file come from it; checkpoints keep it."""
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from core import train
from core.config import TrainConfig, validate
from core.ema import WeightAverage, ramped_decay
from core.rundir import RunDir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL_RUN = ["--batch-size", "8", "--device", "cpu", "--quality-every", "0", "--grid-every", "1000"]


def _run(run_path, steps: int, *flags: str) -> dict:
    """A real CLI run of `steps` steps; its checkpoint."""
    assert train.main(["--steps", str(steps), *SMALL_RUN, "--run-dir", str(run_path), *flags]) == 0
    return torch.load(run_path / "checkpoint.pt", weights_only=False)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_ramped_decay_follows_g_early_and_holds_the_decay_later():
    steps = torch.tensor([1.0, 8.0, 80.0, 890.0, 5000.0])
    expected = torch.tensor([min(0.99, (1 + t) / (10 + t)) for t in steps.tolist()])
    assert torch.allclose(ramped_decay(steps, 0.99), expected)
    assert ramped_decay(steps, 0.99)[0] < 0.2 and ramped_decay(steps, 0.99)[-1] == pytest.approx(0.99)
    assert ramped_decay(steps, 0.9)[2:].tolist() == pytest.approx([0.9] * 3)   # 0.9 holds from step 80


def test_weight_average_moves_toward_the_model_by_the_ramp_and_copies_its_buffers():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    average = WeightAverage(model, 0.99)
    start = {k: v.clone() for k, v in average.module.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model(torch.randn(4, 3))   # a training-mode forward moves BatchNorm's running statistics
    average.update()
    weight = 1 - min(0.99, 2 / 11)   # step 1
    for name, p in model.named_parameters():
        assert torch.allclose(average.module.state_dict()[name], torch.lerp(start[name], p, weight))
    for name, b in model.named_buffers():
        assert torch.equal(average.module.state_dict()[name], b)
    assert not any(p.requires_grad for p in average.module.parameters())


def test_ema_is_on_for_dcgans_fast_preset_only_and_a_chosen_value_wins():
    assert TrainConfig().resolved("fast").ema == 0.99
    assert TrainConfig().resolved("dcgan64").ema == 0.0
    assert TrainConfig(gan="wgan-gp").resolved("fast").ema == 0.0
    assert TrainConfig(gan="hinge").resolved("fast").ema == 0.0
    assert TrainConfig(ema=0.0).resolved("fast").ema == 0.0
    assert TrainConfig(gan="hinge", ema=0.9).resolved("fast").ema == 0.9


@pytest.mark.parametrize("value", ["1.0", "-0.1"])
def test_cli_refuses_an_ema_outside_zero_to_one_before_training(tmp_path, value):
    result = subprocess.run([sys.executable, "-m", "core.train", "--ema", value, "--run-dir", str(tmp_path / "r")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"ema {float(value)} is out of range; use a value in [0, 1)" in result.stderr
    assert not (tmp_path / "r").exists()


def test_the_generator_file_holds_the_ema_weights_and_without_ema_gs_own(tmp_path):
    averaged = _run(tmp_path / "ema", 3, "--ema", "0.99")
    generator = load_file(tmp_path / "ema" / "generator.safetensors")
    assert _same(generator, averaged["G_ema"]) and not _same(generator, averaged["G"])
    plain = _run(tmp_path / "plain", 3, "--ema", "0")
    assert "G_ema" not in plain and _same(load_file(tmp_path / "plain" / "generator.safetensors"), plain["G"])


@pytest.mark.parametrize("saved_by", ["this Blink", "a Blink before EMA sampling"])
def test_resume_continues_the_average_from_the_checkpoint(tmp_path, saved_by):
    run_path = tmp_path / "run"
    before = _run(run_path, 3)                      # the fast preset's default: ema 0.99
    if saved_by != "this Blink":
        del before["G_ema"]
        torch.save(before, run_path / "checkpoint.pt")
    # The average belongs to the run's config: a different decay is refused, nothing trains.
    assert train.main(["--resume", str(run_path), "--ema", "0.5", "--steps", "4"]) == 2
    assert train.main(["--resume", str(run_path), "--steps", "4"]) == 0
    after = torch.load(run_path / "checkpoint.pt", weights_only=False)
    assert after["step"] == 4
    # One step on from the saved average (or from G, which an older checkpoint's average starts
    # as) with step 4's ramped decay: restored, not reset to G or to step 1's ramp.
    start = before.get("G_ema", before["G"])
    weight = 1 - min(0.99, 5 / 14)
    for name, value in after["G_ema"].items():
        if value.is_floating_point() and "running" not in name:   # parameters; buffers are G's own
            assert torch.allclose(value, torch.lerp(start[name], after["G"][name], weight), atol=1e-6), name
        else:
            assert torch.equal(value, after["G"][name]), name
    assert _same(load_file(run_path / "generator.safetensors"), after["G_ema"])


def test_grids_and_the_quality_meter_show_the_average_not_g(tmp_path):
    """A learning rate high enough that G runs ahead of its average within a few steps, so the
    two nets' samples differ beyond rounding (kept constant: the default decay would slow G's
    last steps to a crawl)."""
    import numpy as np
    from PIL import Image

    from core import quality, sample
    from core.images import grid_image
    run_path = tmp_path / "run"
    checkpoint = _run(run_path, 4, "--lr-g", "0.05", "--lr-decay-start", "1", "--quality-every", "4")
    shown, _ = sample.load_run_generator(str(run_path))   # generator.safetensors: the average
    trained, _ = sample.load_run_generator(str(run_path))
    trained.load_state_dict(checkpoint["G"])

    def grid(net):
        with torch.no_grad():
            return grid_image(net.eval()(checkpoint["fixed_noise"]).numpy(), sample.grid_columns(net)).astype(int)
    with Image.open(run_path / "grids" / "step_000004.png") as png:
        saved = np.asarray(png).astype(int)
    assert np.abs(saved - grid(shown)).max() <= 1 < np.abs(saved - grid(trained)).max()   # 1: rounding

    logged = [e for e in RunDir(str(run_path)).read_events()[0] if "quality_fd" in e][-1]
    meter = quality.default_mnist_meter()   # the run's meter: bundled MNIST's
    assert logged["quality_fd"] == pytest.approx(meter.measure(shown, "cpu")["fd"], rel=1e-3)
    assert logged["quality_fd"] != pytest.approx(meter.measure(trained, "cpu")["fd"], rel=1e-3)
