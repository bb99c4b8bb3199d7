"""Differentiable augmentation of what D sees (DiffAugment: Zhao et al. 2020, "Differentiable
Augmentation for Data-Efficient GAN Training", mit-han-lab/data-efficient-gans, BSD-2).

On a few hundred images D soon learns the training set by heart, calls every fake fake, and G
gets no signal (issue 30: a folder of own images was lost within the run's first steps;
lab/README.md, "Figures taken out of code comments"). Showing D every image,
real and fake, randomly shifted, recoloured and with a square cut out makes it judge shapes
rather than memorise pixels. Because the same random changes are applied, differentiably, to
G's images in G's step too, G learns the un-augmented images: nothing of the augmentation
leaks into what it draws.

    D_seen = Augmented(D, adaptive=True)   # what GanStep trains against; the checkpoint keeps D itself

Adaptive (ADA's rule: Karras et al. 2020, "Training Generative Adversarial Networks with Limited
Data", NVlabs/stylegan2-ada-pytorch): each augmentation is applied to each image with a
probability p that starts at 0 and follows how sure D is of the real images. While the share of
real images D calls real (the sign of its logit, averaged) stays above OVERFIT_TARGET, D is
learning the set by heart and p rises; below it, p falls. So a run starts as fast as one without
augmentation (fixed DiffAugment slowed the first minutes) and gets it once D starts to memorise,
which on the benchmark set's 111 images a class came within a default run's first minutes, as
every class's samples turned into one image (lab/README.md, "Augmentation at three sizes of the
set" and "Own images: augmentation off, on every image, adaptive"). The losses report D's logits on
the real batch (`saw_real`); p is a tensor updated in the step's graph, never read there.
WGAN-GP's critic scores have no sign to read: it augments every image (p = 1).

Every operation is elementwise or a gather along an image's own rows and columns, with shapes
fixed by the batch: the same graph on every XLA step, and under SPMD each device augments its
own share of the batch. Whether a run augments is core/config.py `augments`.
"""
from __future__ import annotations

import torch
from torch import nn

TRANSLATION = 0.125   # the most an image moves, as a share of its side (DiffAugment's)
CUTOUT = 0.5          # the cut square's side, as a share of the image's (DiffAugment's)
OVERFIT_TARGET = 0.6  # ADA's target for E[sign(D(real))]
# p moves by at most (batch / P_SPEED_IMAGES) per D step: from 0 to 1 within minutes of the default
# CPU run (lab/README.md, "Figures taken out of code comments"), where ADA's 500,000 suit runs of days.
P_SPEED_IMAGES = 100_000
OVERFIT_MEMORY = 0.9  # the estimate's moving average keeps this much of itself per step (~10 batches)


def _per_image(x: torch.Tensor) -> torch.Tensor:
    """One uniform [0, 1) number per image, shaped to broadcast over it."""
    return torch.rand(x.size(0), 1, 1, 1, dtype=x.dtype, device=x.device)


def colour(x: torch.Tensor) -> torch.Tensor:
    """Brightness, saturation and contrast, each by its own random amount per image ([-1, 1] images)."""
    x = x + (_per_image(x) - 0.5)
    grey = x.mean(dim=1, keepdim=True)
    x = (x - grey) * (_per_image(x) * 2) + grey
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * (_per_image(x) + 0.5) + mean


def _along(values: torch.Tensor, dim: int) -> torch.Tensor:
    """(N, size) values per image and row (dim 2) or column (dim 3), shaped to broadcast over images."""
    shape = [values.size(0), 1, 1, 1]
    shape[dim] = values.size(1)
    return values.view(shape)


def _shift_index(x: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """For each image, the padded row (dim 2) or column (dim 3) that each output one reads:
    moved by up to TRANSLATION of the side, 0 and size + 1 being the zero border."""
    most = int(size * TRANSLATION + 0.5)
    shift = torch.randint(-most, most + 1, (x.size(0), 1), device=x.device)
    return _along((torch.arange(size, device=x.device)[None] + shift + 1).clamp(0, size + 1), dim)


def translation(x: torch.Tensor) -> torch.Tensor:
    """Each image moved by up to 1/8 of its side in each direction; what moves in is black (0)."""
    n, c, h, w = x.shape
    padded = nn.functional.pad(x, (1, 1, 1, 1))
    rows = padded.gather(2, _shift_index(x, h, 2).expand(n, c, h, w + 2))
    return rows.gather(3, _shift_index(x, w, 3).expand(n, c, h, w))


def cutout(x: torch.Tensor) -> torch.Tensor:
    """A square of half the image's side set to 0 in each image, anywhere (clipped at the edges)."""
    n, _, h, w = x.shape
    cut_h, cut_w = int(h * CUTOUT + 0.5), int(w * CUTOUT + 0.5)

    def inside(size: int, cut: int, dim: int) -> torch.Tensor:
        start = torch.randint(0, size + (1 - cut % 2), (n, 1), device=x.device) - cut // 2
        where = torch.arange(size, device=x.device)[None]
        return _along((where >= start) & (where < start + cut), dim)

    return x * ~(inside(h, cut_h, 2) & inside(w, cut_w, 3))


def diff_augment(x: torch.Tensor, p: torch.Tensor | float = 1.0) -> torch.Tensor:
    """DiffAugment's policy for small sets: colour, translation, cutout, each given to each image
    with probability p (all of them to every image at p = 1). Every image goes through every
    operation either way: the graph does not depend on p."""
    for augment in (colour, translation, cutout):
        x = torch.where(_per_image(x) < p, augment(x), x)
    return x


class Augmented(nn.Module):
    """D judging augmented images: D(diff_augment(x, p), labels). D stays a submodule, so its
    parameters, freezing and modules are the wrapped D's. adaptive: p follows ADA's rule (the
    module docstring); otherwise p is 1."""

    def __init__(self, D: nn.Module, adaptive: bool = False, average=None, processes: int = 1):
        """average, processes: under DDP (core/distributed.py) the mean of a tensor over the run's
        processes, and their number; p then follows the global batch, alike in every process."""
        super().__init__()
        self.D, self.adaptive = D, adaptive
        self.average, self.processes = average or (lambda tensor: tensor), processes
        device = next(iter(D.parameters()), torch.zeros(())).device
        self.register_buffer("p", torch.tensor(0.0 if adaptive else 1.0, device=device))
        self.register_buffer("overfit", torch.tensor(0.0, device=device))   # E[sign(D(real))], averaged

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        x = diff_augment(x, self.p.to(x.dtype))
        return self.D(x) if labels is None else self.D(x, labels)

    @torch.no_grad()
    def saw_real(self, logits: torch.Tensor) -> None:
        """D's logits on a real batch (the losses call this): p moves toward what they say."""
        if not self.adaptive:
            return
        said = self.average(torch.sign(logits.detach().float()).mean())
        self.overfit.mul_(OVERFIT_MEMORY).add_((1 - OVERFIT_MEMORY) * said)
        step = torch.sign(self.overfit - OVERFIT_TARGET) * (logits.shape[0] * self.processes / P_SPEED_IMAGES)
        self.p.copy_((self.p + step).clamp(0.0, 1.0))

    def state(self) -> dict:
        return {"p": self.p.detach().cpu(), "overfit": self.overfit.detach().cpu()}

    def load_state(self, state: dict) -> None:
        self.p.copy_(state["p"].to(self.p.device))
        self.overfit.copy_(state["overfit"].to(self.overfit.device))
