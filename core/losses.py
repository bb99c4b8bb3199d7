"""The GAN loss family: non-saturating (DCGAN), WGAN-GP, hinge (SNGAN) and relativistic (R3GAN).

Every loss has the same two entry points, so the training loop does not know which it runs:
    discriminator_loss(D, real, fake, labels=None) -> (loss, stats)
    generator_loss(D, fake, labels=None)           -> (loss, stats)
`labels` are the batch's class labels for a class-conditional D (fake images are drawn with
the real batch's labels, so one tensor serves both; None when unconditional).
`stats` are detached scalar tensors (never floats: reading a value would force a device sync
inside the step). Discriminator outputs are logits and are taken to fp32 before any loss.

Nothing here branches on a tensor's value: the only Python conditions are on module types and
constructor arguments, so XLA traces the same graphs every step; the relativistic loss's lazy R1
adds a second graph every R1_EVERY steps, which is why its row keeps it off XLA (core/gans.py).
The n_critic schedule (critic updates per generator update) is a fixed Python loop in
core/train.py Loop.step.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from core import gans


def gradient_penalty(D: nn.Module, real: torch.Tensor, fake: torch.Tensor,
                     alpha: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> torch.Tensor:
    """WGAN-GP's penalty E[(||grad_x D(x_hat)||_2 - 1)^2], x_hat between real and fake.

    One interpolation weight per sample, shaped (B,1,1,1), and one gradient norm per sample:
    mixing per pixel, or taking one norm over the whole batch, are the classic mistakes
    (PyTorch-GAN d2977bc). `alpha` is drawn here unless given (tests pass their own).

    Summing the scores before autograd.grad gives each sample its own gradient only because
    no sample's score depends on another sample; a BatchNorm critic breaks that, so it is refused.
    """
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in D.modules()):
        raise ValueError("gradient_penalty needs a critic without BatchNorm (batch statistics mix the "
                         "samples' gradients); build it with norm='layer' or 'none'.")
    if alpha is None:
        alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device, dtype=real.dtype)
    x_hat = (alpha * real.detach() + (1 - alpha) * fake.detach()).requires_grad_(True)
    with _no_fp16(real.device.type):
        scores = _judge(D, x_hat, labels).float()
        (grad,) = torch.autograd.grad(scores.sum(), x_hat, create_graph=True)
    # epsilon inside the root: the norm's gradient is NaN at exactly zero.
    norms = (grad.float().flatten(1).pow(2).sum(1) + 1e-12).sqrt()
    return (norms - 1).pow(2).mean()


def _judge(D, images: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    """D's logits; labels only reach a class-conditional D (any plain critic D(x) works too)."""
    return D(images) if labels is None else D(images, labels)


def _judge_real(D, images: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    """D's fp32 logits on the real batch, which an adaptive augmentation (core/augment.py) reads."""
    logits = _judge(D, images, labels).float()
    _tell_augmentation(D, logits)
    return logits


def _tell_augmentation(D, signed: torch.Tensor) -> None:
    """What an adaptive augmentation (core/augment.py Augmented.saw_real) reads: values whose sign
    says D told real from fake (its logits on the real batch; a pairing's real-less-fake scores)."""
    seen = getattr(D, "saw_real", None)
    if seen is not None:
        seen(signed)


def _no_fp16(device_type: str):
    """Autocast off for the penalty under fp16: its input gradients are not loss-scaled (the
    scaler only sees the final loss), so in fp16 they can underflow to zero. bf16 has fp32's
    range and keeps its autocast."""
    if torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) == torch.float16:
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


class NonSaturating:
    """The seed's DCGAN loss: BCE on logits (safe under autocast), G trained to make D say 1."""

    def discriminator_loss(self, D, real, fake, labels=None):
        real_logits, fake_logits = _judge_real(D, real, labels), _judge(D, fake.detach(), labels).float()
        loss = (F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
                + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits)))
        return loss, {"d_real": torch.sigmoid(real_logits).mean().detach(),
                      "d_fake": torch.sigmoid(fake_logits).mean().detach()}

    def generator_loss(self, D, fake, labels=None):
        logits = _judge(D, fake, labels).float()
        return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits)), {}


class WGANGP:
    """Wasserstein loss with gradient penalty (Gulrajani et al. 2017)."""

    def __init__(self, gp_weight: float = 10.0, random_rows=None):
        """random_rows: the trainer's Runtime.random_rows, which draws the mixing weights of a batch's
        rows (under DDP: drawn for the whole batch in every process, each keeping its rows); None:
        drawn here for the rows given."""
        self.gp_weight, self.random_rows = gp_weight, random_rows

    def discriminator_loss(self, D, real, fake, labels=None):
        real_score, fake_score = _judge(D, real, labels).float().mean(), _judge(D, fake.detach(), labels).float().mean()
        alpha = self.random_rows(torch.rand, real.size(0), 1, 1, 1, dtype=real.dtype) if self.random_rows else None
        penalty = gradient_penalty(D, real, fake, alpha=alpha, labels=labels)
        loss = fake_score - real_score + self.gp_weight * penalty
        return loss, {"wasserstein": (real_score - fake_score).detach(), "gp": penalty.detach()}

    def generator_loss(self, D, fake, labels=None):
        return -_judge(D, fake, labels).float().mean(), {}


class Hinge:
    """Hinge loss (SNGAN, Miyato et al. 2018); the discriminator carries spectral norm."""

    def discriminator_loss(self, D, real, fake, labels=None):
        real_logits, fake_logits = _judge_real(D, real, labels), _judge(D, fake.detach(), labels).float()
        # clamp_min, not F.relu: XLA's autocast runs relu in bf16 even on fp32 inputs, and the
        # loss must stay fp32.
        loss = (1 - real_logits).clamp_min(0).mean() + (1 + fake_logits).clamp_min(0).mean()
        return loss, {"d_real": real_logits.mean().detach(), "d_fake": fake_logits.mean().detach()}

    def generator_loss(self, D, fake, labels=None):
        return -_judge(D, fake, labels).float().mean(), {}


# R1's weight and how often it is taken (scaled by that, StyleGAN2's lazy regularisation): the
# values measured on the fast preset (lab/README.md, "The relativistic loss").
R1_GAMMA, R1_EVERY = 0.1, 16


class RelativisticPairing:
    """R3GAN's RpGAN (Huang et al. 2024) with R1: D learns to score each real image above the fake
    paired with it, softplus(-(D(x) - D(G(z)))); G the same with the roles swapped, against the real
    batch D last saw. R1 (the squared gradient of D's scores on the real images) every R1_EVERY of
    D's updates, counted over the whole run (the count is in its checkpoints: `state`). Through a
    BatchNorm D the gradient of the batch's summed scores mixes the images' own (each image's score
    depends on the batch's statistics): the penalty as measured in lab/. Its scores have no sign of
    their own: an adaptive augmentation reads each pair's, real above its fake."""

    def __init__(self):
        self.updates = 0          # D's loss computations so far: R1 at every R1_EVERY-th
        self._real = None         # (images, labels) of the last real batch, for G's loss

    def discriminator_loss(self, D, real, fake, labels=None):
        penalised = self.updates % R1_EVERY == 0
        self.updates += 1
        images = real.detach().requires_grad_(True) if penalised else real
        with _no_fp16(real.device.type) if penalised else contextlib.nullcontext():
            real_logits = _judge(D, images, labels).float()
            fake_logits = _judge(D, fake.detach(), labels).float()
            _tell_augmentation(D, real_logits - fake_logits)
            loss = F.softplus(-(real_logits - fake_logits)).mean()
            if penalised:
                (grad,) = torch.autograd.grad(real_logits.sum(), images, create_graph=True)
                loss = loss + 0.5 * R1_GAMMA * R1_EVERY * grad.float().flatten(1).pow(2).sum(1).mean()
        self._real = (real.detach(), labels)
        return loss, {"d_real": real_logits.mean().detach(), "d_fake": fake_logits.mean().detach()}

    def generator_loss(self, D, fake, labels=None):
        real, real_labels = self._real
        real_logits = _judge(D, real, real_labels).float()
        return F.softplus(-(_judge(D, fake, labels).float() - real_logits)).mean(), {}

    def state(self) -> dict:
        """What a checkpoint keeps, so that a resumed run penalises the updates an unbroken one would."""
        return {"updates": self.updates}

    def load_state(self, state: dict) -> None:
        self.updates = state["updates"]


def make_loss(gan: gans.GanType, gp_weight: float = 10.0, random_rows=None):
    """The loss object for a GAN type (its row in core/gans.py names the class). random_rows: the
    trainer's Runtime.random_rows, for a penalty's random mixing weights."""
    loss = globals()[gan.loss]
    return loss(gp_weight, random_rows) if gan.gradient_penalty else loss()
