"""Generators and discriminators, sized by preset and by the data's resolution and channels.

One builder covers both presets. With `width=64` at 64x64 it is exactly the seed's DCGAN:
    G: z (100x1x1) -> ConvT 4x4/1 -> 512x4x4 -> 256x8x8 -> 128x16x16 -> 64x32x32 -> nc x 64x64
    D: nc x 64x64 -> 64x32x32 -> 128x16x16 -> 256x8x8 -> 512x4x4 -> Conv 4x4/1 -> 1
At 28x28 (MNIST) the same pattern starts from 7x7 and needs two up-sampling blocks; at 32x32
(CIFAR) it starts from 4x4 and needs three. Up-sampling is ConvTranspose2d only: XLA lowers it
everywhere, while nn.Upsample's backward falls back to the host on non-TPU XLA devices.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

# Network width per preset. "fast" is sized for a 2-core CPU at the data's native resolution
# (chosen by bench/bench_speed.py); "dcgan64" is the seed's DCGAN (ngf = ndf = 64 at 64x64).
PRESET_WIDTH = {"fast": 32, "dcgan64": 64}


def resolve_preset(preset: str, device_kind: str) -> tuple[str, str]:
    """The preset to use and why, for 'auto' and explicit choices alike."""
    if preset != "auto":
        return preset, "chosen by the user"
    if device_kind in ("tpu", "cuda"):
        return "dcgan64", f"auto: {device_kind.upper()} has the compute for the seed's 64x64 DCGAN"
    return "fast", f"auto: a small DCGAN at the data's native size trains in minutes on a {device_kind.upper()}"


def model_resolution(preset: str, data_resolution: int) -> int:
    """dcgan64 trains at 64x64 (the data is resized); fast trains at the data's own size."""
    return 64 if preset == "dcgan64" else data_resolution


@dataclass(frozen=True)
class GeneratorSpec:
    """Everything needed to rebuild a generator: stored beside its weights."""
    z_dim: int
    channels: int
    resolution: int
    width: int

    def to_dict(self) -> dict:
        return asdict(self)


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


class Generator(nn.Module):
    def __init__(self, spec: GeneratorSpec):
        super().__init__()
        self.spec = spec
        self.z_dim, self.channels, self.resolution = spec.z_dim, spec.channels, spec.resolution
        blocks, start = _upsampling_blocks(spec.resolution)
        ch = spec.width * 2 ** (blocks - 1)
        layers: list[nn.Module] = [   # state size: ch x start x start
            nn.ConvTranspose2d(spec.z_dim, ch, start, 1, 0, bias=False), FP32BatchNorm2d(ch), nn.ReLU(True)]
        for _ in range(blocks - 1):   # each block doubles the size and halves the channels
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), FP32BatchNorm2d(ch // 2), nn.ReLU(True)]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, spec.channels, 4, 2, 1, bias=False)]   # nc x resolution^2
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.dim() == 2:
            z = z[:, :, None, None]
        # Tanh in fp32 and clamp: bf16 rounding gives values like -1.0001 that break image saving.
        return torch.tanh(self.net(z).float()).clamp(-1.0, 1.0)


class Discriminator(nn.Module):
    """DCGAN discriminator returning logits (N,). norm: batch | layer | none; spectral: SNGAN."""

    def __init__(self, channels: int, resolution: int, width: int, norm: str = "batch", spectral: bool = False):
        super().__init__()
        blocks, end = _upsampling_blocks(resolution)
        wrap = nn.utils.parametrizations.spectral_norm if spectral else (lambda m: m)

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
        layers += [wrap(nn.Conv2d(ch, 1, end, 1, 0))]   # 1x1 logit
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten()


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


def discriminator_norm(gan: str) -> tuple[str, bool]:
    """(norm, spectral) per GAN type: WGAN-GP needs no batch statistics, hinge uses SN."""
    return {"dcgan": ("batch", False), "wgan-gp": ("layer", False), "hinge": ("none", True)}[gan]


def build(gan: str, preset: str, channels: int, resolution: int, z_dim: int) -> tuple[Generator, Discriminator]:
    width = PRESET_WIDTH[preset]
    generator = Generator(GeneratorSpec(z_dim, channels, resolution, width))
    norm, spectral = discriminator_norm(gan)
    discriminator = Discriminator(channels, resolution, width, norm, spectral)
    generator.apply(init_weights)
    discriminator.apply(init_weights)
    return generator, discriminator


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
