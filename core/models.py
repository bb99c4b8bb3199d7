"""Generators and discriminators, sized by preset and by the data's resolution and channels.

One builder covers both presets. With `width=64` at 64x64 it is exactly the seed's DCGAN:
    G: z (100x1x1) -> ConvT 4x4/1 -> 512x4x4 -> 256x8x8 -> 128x16x16 -> 64x32x32 -> nc x 64x64
    D: nc x 64x64 -> 64x32x32 -> 128x16x16 -> 256x8x8 -> 512x4x4 -> Conv 4x4/1 -> 1
At 28x28 (MNIST) the same pattern starts from 7x7 and needs two up-sampling blocks; at 32x32
(CIFAR) it starts from 4x4 and needs three. Up-sampling is ConvTranspose2d only: XLA lowers it
everywhere, while nn.Upsample's backward falls back to the host on non-TPU XLA devices.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from core import gans
# The torch-free description of the networks (core/architecture.py), under the names the trainer
# and the benches use here.
from core.architecture import PRESET_WIDTH, GeneratorSpec, grid_columns, model_resolution, resolve_preset  # noqa: F401


def _upsampling_blocks(resolution: int) -> tuple[int, int]:
    """(number of x2 blocks, starting size) with the starting size between 4 and 7."""
    blocks = 0
    size = resolution
    while size > 7:
        if size % 2:
            break
        size //= 2
        blocks += 1
    if not 4 <= size <= 7 or blocks == 0:
        raise ValueError(f"resolution {resolution} is not supported; use 28, 32 or 64 (or 4..7 times a power of 2)")
    return blocks, size


class FP32BatchNorm2d(nn.BatchNorm2d):
    """BatchNorm that always runs in fp32, autocast or not.

    The seed's bf16 policy: convolutions in bf16, normalisation in fp32, because BatchNorm
    statistics in low precision shift the colours of generated images. The next convolution
    casts back to bf16 under autocast, so only the normalisation pays for fp32.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


class SyncedBatchNorm2d(FP32BatchNorm2d):
    """FP32BatchNorm2d over the global batch of all of a run's processes (core/distributed.py: torchrun,
    DDP), so N processes normalise what one process does on the same batch. torch's SyncBatchNorm
    refuses the CPU ("expected input tensor to be on GPU"), so gloo could not test it; this one runs
    wherever torch.distributed does: one all-reduce of each channel's mean and mean square per
    forward, differentiable (its backward all-reduces their gradients), so each rank's gradient
    counts the other ranks' images as one process's would.

    Only in training with gradients: a judgement made without them on one rank alone (the grid's
    verdicts, rank 0's) normalises its own batch, as a plain BatchNorm in training mode does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled() and dist.is_initialized()):
            return super().forward(x)
        # The differentiable all-reduce (torch.distributed.all_reduce is not); imported here, not at the
        # top, as it brings torch's RPC modules along, which a run in one process never needs.
        from torch.distributed.nn.functional import all_reduce
        with torch.autocast(x.device.type, enabled=False):
            x = x.float()
            world = dist.get_world_size()
            local = torch.stack([x.mean((0, 2, 3)), (x * x).mean((0, 2, 3))])
            mean, square = all_reduce(local) / world   # every rank has as many rows
            var = (square - mean * mean).clamp_min(0)
            with torch.no_grad():   # the running statistics as BatchNorm keeps them (unbiased variance)
                count = x.numel() // x.size(1) * world
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var * count / max(count - 1, 1), self.momentum)
                self.num_batches_tracked.add_(1)
            scale = self.weight * torch.rsqrt(var + self.eps)
            return x * scale[None, :, None, None] + (self.bias - mean * scale)[None, :, None, None]


class LatentProjection(nn.ConvTranspose2d):
    """G's first layer, z (N, z_dim, 1, 1) -> (N, ch, k, k): a ConvTranspose2d on a 1x1 input is a
    matrix product, and computed as one it is faster on CPU (oneDNN's transposed convolution is
    slow for this shape: lab/README.md, "Results (2026-12-01, the class-conditional defaults)").
    Same weight and state-dict key as the seed's ConvTranspose2d, so checkpoints and the seed's
    architecture are unchanged."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        k = self.kernel_size[0]
        return (z.flatten(1) @ self.weight.flatten(1)).view(z.size(0), self.out_channels, k, k)


def default_labels(n: int, classes: int, device=None) -> torch.Tensor:
    """Labels 0, 1, ..., classes-1, 0, 1, ... for n samples: every class, equally often."""
    return torch.arange(n, device=device) % classes


class LogitHead(nn.Conv2d):
    """D's last layer, a conv whose kernel covers the whole (ch, k, k) feature map: a matrix
    product, computed as one (on CPU faster than oneDNN's convolution for this shape: lab/README.md,
    "Results (2026-12-01, the class-conditional defaults)").
    Same weight and state-dict key as the Conv2d; spectral norm's parametrization still applies."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            # NHWC in memory: flatten in that order (a free view) and order the weight to match.
            x, weight = x.permute(0, 2, 3, 1), weight.permute(0, 2, 3, 1)
        logits = x.flatten(1) @ weight.flatten(1).t().to(x.dtype)
        if self.bias is not None:
            logits = logits + self.bias.to(logits.dtype)
        return logits[:, :, None, None]


class Generator(nn.Module):
    """DCGAN generator. With spec.classes > 0 it is class-conditional (Mirza & Osindero 2014):
    the one-hot label is joined to z, and G(z) without labels draws classes 0, 1, 2, ... in turn."""

    def __init__(self, spec: GeneratorSpec):
        super().__init__()
        self.spec = spec
        self.z_dim, self.channels, self.resolution = spec.z_dim, spec.channels, spec.resolution
        self.classes = spec.classes
        blocks, start = _upsampling_blocks(spec.resolution)
        ch = spec.width * 2 ** (blocks - 1)
        layers: list[nn.Module] = [   # state size: ch x start x start
            LatentProjection(spec.z_dim + spec.classes, ch, start, 1, 0, bias=False), FP32BatchNorm2d(ch),
            nn.ReLU(True)]
        for _ in range(blocks - 1):   # each block doubles the size and halves the channels
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), FP32BatchNorm2d(ch // 2), nn.ReLU(True)]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, spec.channels, 4, 2, 1, bias=False)]   # nc x resolution^2
        self.net = nn.Sequential(*layers)

    def join_labels(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """The first layer's input (N, z_dim [+ classes], 1, 1). labels: class indices (N,), or
        class weights (N, classes) such as a blend of two one-hots (a 3 morphing into an 8)."""
        z = z.flatten(1)
        if self.classes:
            if labels is None:
                labels = default_labels(z.size(0), self.classes, z.device)
            if labels.dim() == 1:   # one-hot by comparison: F.one_hot checks the range, a device sync
                labels = labels[:, None] == torch.arange(self.classes, device=labels.device)
            z = torch.cat([z, labels.to(z.dtype)], 1)
        return z[:, :, None, None]

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        z = self.join_labels(z, labels)
        # Tanh in fp32 and clamp: bf16 rounding gives values like -1.0001 that break image saving.
        return torch.tanh(self.net(z).float()).clamp(-1.0, 1.0)


class _SpectralNormWithoutVdot(nn.utils.parametrizations._SpectralNorm):
    """PyTorch's spectral norm, with sigma computed as (u * Wv).sum() instead of torch.vdot.

    XLA does not lower aten::vdot, so the stock version sends every SN layer to the host on
    every forward (~18 round trips per hinge step). Same buffers, same state-dict keys, same values."""

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.ndim == 1:
            return super().forward(weight)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u = self._u.clone(memory_format=torch.contiguous_format)   # cloned as upstream: the buffers update in place
        v = self._v.clone(memory_format=torch.contiguous_format)
        return weight / (u * torch.mv(weight_mat, v)).sum()


def spectral_norm(module: nn.Module) -> nn.Module:
    """nn.utils.parametrizations.spectral_norm(module), lowered on XLA (see _SpectralNormWithoutVdot)."""
    dim = 1 if isinstance(module, nn.ConvTranspose2d) else 0
    nn.utils.parametrize.register_parametrization(module, "weight", _SpectralNormWithoutVdot(module.weight, dim=dim))
    return module


class Discriminator(nn.Module):
    """DCGAN discriminator returning logits (N,). norm: batch | layer | none; spectral: SNGAN.

    With classes > 0 it is a projection discriminator (Miyato & Koyama 2018): the logit gains
    <embed(label), sum of the last feature map>, so D judges "is this a real 7", not "is this real".
    """

    def __init__(self, channels: int, resolution: int, width: int, norm: str = "batch", spectral: bool = False,
                 classes: int = 0):
        super().__init__()
        blocks, end = _upsampling_blocks(resolution)
        wrap = spectral_norm if spectral else (lambda m: m)

        def normalise(c: int) -> nn.Module:
            if norm == "batch":
                return FP32BatchNorm2d(c)
            if norm == "layer":   # WGAN-GP: the penalty is per sample, so no batch statistics
                return nn.GroupNorm(1, c)
            return nn.Identity()

        ch = width
        layers: list[nn.Module] = [wrap(nn.Conv2d(channels, ch, 4, 2, 1)), nn.LeakyReLU(0.2, True)]  # no norm on the first
        for _ in range(blocks - 1):
            layers += [wrap(nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=norm == "none")), normalise(ch * 2),
                       nn.LeakyReLU(0.2, True)]
            ch *= 2
        layers += [wrap(LogitHead(ch, 1, end, 1, 0))]   # 1x1 logit
        self.net = nn.Sequential(*layers)
        self.embed = wrap(nn.Embedding(classes, ch)) if classes else None

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.embed is None:
            return self.net(x).flatten()
        if labels is None:
            raise ValueError("this discriminator is class-conditional: pass the images' labels")
        features = self.net[:-1](x)
        projection = (features.float().sum((2, 3)) * self.embed(labels).float()).sum(1)
        return self.net[-1](features).flatten().float() + projection


def init_weights(module: nn.Module) -> None:
    """The seed's init: conv weights N(0, 0.02); BatchNorm weight N(1, 0.02), bias 0."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        parametrized = getattr(module, "parametrizations", None)   # spectral norm keeps the raw weight here
        target = parametrized.weight.original if parametrized is not None else module.weight
        nn.init.normal_(target, 0.0, 0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):   # small, like the convs: the projection starts near 0
        parametrized = getattr(module, "parametrizations", None)
        nn.init.normal_(parametrized.weight.original if parametrized is not None else module.weight, 0.0, 0.02)


def build(gan: gans.GanType, preset: str, channels: int, resolution: int, z_dim: int,
          classes: int = 0) -> tuple[Generator, Discriminator]:
    width = PRESET_WIDTH[preset]
    generator = Generator(GeneratorSpec(z_dim, channels, resolution, width, classes))
    # Per GAN type (core/gans.py): WGAN-GP needs no batch statistics, hinge uses spectral norm.
    discriminator = Discriminator(channels, resolution, width, gan.d_norm, gan.spectral, classes)
    generator.apply(init_weights)
    discriminator.apply(init_weights)
    return generator, discriminator


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
