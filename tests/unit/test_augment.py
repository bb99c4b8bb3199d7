"""DiffAugment (core/augment.py): what each augmentation does to an image, that G's gradient goes
through it, and when a run turns it on (core/config.py augments)."""
from __future__ import annotations

import pytest
import torch

from core.augment import OVERFIT_TARGET, P_SPEED_IMAGES, Augmented, colour, cutout, diff_augment, translation
from core.config import AUGMENT_BELOW, TrainConfig, augments


def numbered(n: int = 16, side: int = 32) -> torch.Tensor:
    """Images whose every pixel has its own value (never 0): where each came from can be read back."""
    return torch.arange(1, n * 3 * side * side + 1, dtype=torch.float32).view(n, 3, side, side)


def test_translation_moves_each_image_whole_pixels_within_an_eighth_and_brings_in_black():
    torch.manual_seed(0)
    x = numbered()
    moved = translation(x)
    shifts = set()
    for before, after in zip(x, moved):
        found = [(dy, dx) for dy in range(-4, 5) for dx in range(-4, 5)
                 if torch.equal(after, shifted(before, dy, dx))]
        assert len(found) == 1, "each image is its input moved by at most 4 of its 32 pixels"
        shifts.add(found[0])
    assert len(shifts) > 4   # each image its own shift


def shifted(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """image moved down dy and right dx pixels (negative: up, left), zeros where nothing was."""
    out = torch.zeros_like(image)
    _, h, w = image.shape
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        image[:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return out


def test_cutout_blacks_out_one_square_of_half_the_side_in_every_channel_and_nothing_else():
    torch.manual_seed(1)
    x = numbered()
    cut = cutout(x)
    for before, after in zip(x, cut):
        gone = after == 0
        assert torch.equal(gone[0], gone[1]) and torch.equal(gone[0], gone[2])
        rows, cols = gone[0].any(1).nonzero().flatten(), gone[0].any(0).nonzero().flatten()
        assert 0 < len(rows) <= 16 and 0 < len(cols) <= 16
        # One rectangle (a square clipped by the image's edges): every pixel in its span is cut.
        assert gone[0][rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()
        assert int(gone[0].sum()) == len(rows) * len(cols)
        assert len(rows) == 16 or rows.min() == 0 or rows.max() == 31
        assert torch.equal(after[~gone], before[~gone])


def test_colour_changes_each_image_by_its_own_amounts():
    torch.manual_seed(2)
    x = torch.rand(1, 3, 8, 8).expand(8, 3, 8, 8) * 2 - 1
    changed = colour(x)
    assert changed.shape == x.shape
    assert len({round(float(image.mean()), 4) for image in changed}) == 8


def test_gs_gradient_goes_through_the_augmentation_and_d_is_the_wrapped_one():
    torch.manual_seed(3)
    D = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(1))
    fake = (torch.rand(4, 3, 16, 16) * 2 - 1).requires_grad_(True)
    seen = Augmented(D)
    seen(fake).sum().backward()
    assert fake.grad is not None and fake.grad.abs().sum() > 0
    assert [p for p in seen.parameters()] == [p for p in D.parameters()]
    seen.requires_grad_(False)
    assert not any(p.requires_grad for p in D.parameters())
    # A conditional D gets its labels.
    class Conditional(torch.nn.Module):
        def forward(self, x, labels):
            got["labels"] = labels
            return x.mean((1, 2, 3))
    got = {}
    Augmented(Conditional())(fake, torch.tensor([1, 2, 3, 4]))
    assert got["labels"].tolist() == [1, 2, 3, 4]


def test_the_same_seed_augments_the_same_way():
    x = torch.rand(4, 3, 32, 32) * 2 - 1
    torch.manual_seed(4)
    first = diff_augment(x)
    torch.manual_seed(4)
    assert torch.equal(diff_augment(x), first)


def test_at_p_0_nothing_is_augmented_and_at_p_1_everything_is():
    x = torch.rand(8, 3, 16, 16) * 2 - 1
    assert torch.equal(diff_augment(x, torch.tensor(0.0)), x)
    torch.manual_seed(5)
    every = diff_augment(x, torch.tensor(1.0))
    torch.manual_seed(5)
    assert torch.equal(every, diff_augment(x)) and not torch.equal(every, x)


def test_adaptive_p_rises_while_d_is_sure_of_the_real_images_and_falls_when_it_is_not():
    D = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 1))
    seen = Augmented(D, adaptive=True)
    assert float(seen.p) == 0.0
    sure, unsure = torch.ones(64, 1) * 3, -torch.ones(64, 1)
    for _ in range(200):
        seen.saw_real(sure)
    # Once its average of sign(D(real)) passed the target, p rose by the batch's share each step.
    assert float(seen.overfit) > OVERFIT_TARGET
    assert 0.9 * 150 * 64 / P_SPEED_IMAGES < float(seen.p) <= 200 * 64 / P_SPEED_IMAGES
    high = float(seen.p)
    for _ in range(400):
        seen.saw_real(unsure)
    assert float(seen.p) == 0.0 < high                      # fallen, and never below 0
    # A checkpoint's p and estimate come back as they were.
    for _ in range(100):
        seen.saw_real(sure)
    again = Augmented(D, adaptive=True)
    again.load_state(seen.state())
    assert float(again.p) == float(seen.p) > 0 and float(again.overfit) == float(seen.overfit)
    # Not adaptive (WGAN-GP's critic has no sign to read): every image, always.
    fixed = Augmented(D)
    fixed.saw_real(unsure)
    assert float(fixed.p) == 1.0


@pytest.mark.parametrize("setting, size, on, says", [
    ("auto", AUGMENT_BELOW - 1, True, f"on: {AUGMENT_BELOW - 1:,} images is under {AUGMENT_BELOW:,}"),
    ("auto", AUGMENT_BELOW, False, f"off: {AUGMENT_BELOW:,} images is at least {AUGMENT_BELOW:,}"),
    ("auto", 10_000, False, "off: 10,000 images"),   # the bundled MNIST trains as it did
    ("on", 60_000, True, "on: chosen by the user"),
    ("off", 300, False, "off: chosen by the user"),
])
def test_a_run_augments_below_the_measured_size_unless_told(setting, size, on, says):
    augmenting, why = augments(TrainConfig(augment=setting), size)
    assert augmenting is on and why.startswith(says)


def test_a_conditional_run_counts_the_images_of_a_class():
    # The benchmark set's 1,000 emoji in 9 classes; the bundled MNIST's 10,000 digits in 10.
    assert augments(TrainConfig(), 997, 9) == (True, f"on: 110 images a class is under {AUGMENT_BELOW:,}")
    assert augments(TrainConfig(), 10_000, 10) == (False, f"off: 1,000 images a class is at least {AUGMENT_BELOW:,}")


def test_the_relativistic_pairing_adapts_augmentation_to_how_often_d_orders_its_pairs_right():
    """Its scores have no sign of their own: what D says of a pair is the sign of the real image's
    score less its fake's. A D that scores every real image above its fake, however low both are,
    raises p; one that orders them the wrong way round keeps it at 0."""
    from core.losses import RelativisticPairing

    class Scorer(torch.nn.Module):   # the images' mean pixel, shifted far below 0: no sign to read
        def forward(self, x, labels=None):
            return x.mean(dim=(1, 2, 3)).unsqueeze(1) - 50.0

    bright, dark = torch.ones(16, 3, 8, 8), -torch.ones(16, 3, 8, 8)
    ordered = Augmented(Scorer(), adaptive=True)
    pairing = RelativisticPairing()
    pairing.updates = 1   # past the R1 update: the scorer has no weights to penalise
    for _ in range(200):
        ordered.p.zero_()   # the images as they are: the test reads the estimate, not the augmentation
        pairing.discriminator_loss(ordered, bright, dark)
    assert float(ordered.overfit) > OVERFIT_TARGET
    reversed_ = Augmented(Scorer(), adaptive=True)
    for _ in range(200):
        pairing.discriminator_loss(reversed_, dark, bright)
    assert float(reversed_.overfit) < 0 and float(reversed_.p) == 0.0
