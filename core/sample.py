"""Sampling from a trained generator: seeds, interpolation, and the sampling CLI.

Generators are loaded from `generator.safetensors` + `generator.json` (no pickle, so a shared
file cannot run code). Latents are drawn on the CPU from the seed, so a seed gives the same
images on any device.

    python -m core.sample --run RUN_DIR --n 16 --seed 0 --out samples.npy
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

from core.models import Generator, GeneratorSpec

MAX_SAMPLES = 1024


class GeneratorFileError(ValueError):
    """A generator file that cannot be loaded; the message says why."""


def load_generator(weights_path: str, meta_path: str, device: str = "cpu") -> tuple[Generator, dict]:
    """Rebuild a generator from its JSON description and load safetensors weights into it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        spec = GeneratorSpec(**{k: int(meta["spec"][k]) for k in ("z_dim", "channels", "resolution", "width")})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GeneratorFileError(f"The generator description ({os.path.basename(meta_path)}) is not valid: {exc}")
    if not (1 <= spec.z_dim <= 4096 and spec.channels in (1, 3) and spec.resolution in (28, 32, 64)
            and 1 <= spec.width <= 512):
        raise GeneratorFileError(f"The generator description has out-of-range values: {spec}.")
    try:
        state = load_file(weights_path)
    except (OSError, SafetensorError, ValueError) as exc:
        raise GeneratorFileError(f"The weights file is not a valid safetensors file: {exc}")
    generator = Generator(spec)
    try:
        generator.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise GeneratorFileError(f"The weights do not match the described generator ({first}).")
    return generator.to(device).eval(), meta


def load_run_generator(run_path: str, device: str = "cpu") -> tuple[Generator, dict]:
    weights, meta = os.path.join(run_path, "generator.safetensors"), os.path.join(run_path, "generator.json")
    if not os.path.exists(weights):
        raise GeneratorFileError(f"No generator in {run_path} yet: it is saved at the first checkpoint.")
    return load_generator(weights, meta, device)


def latents(seed: int, n: int, z_dim: int) -> torch.Tensor:
    """n latent vectors from a seed, drawn on the CPU: identical on every device."""
    return torch.randn(n, z_dim, generator=torch.Generator().manual_seed(int(seed)))


@torch.no_grad()
def generate(generator: Generator, z: torch.Tensor) -> np.ndarray:
    """Images (N, C, H, W) float32 in [-1, 1]."""
    device = next(generator.parameters()).device
    return generator(z.to(device)).float().cpu().numpy()


def slerp(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation, row by row; falls back to linear for (near-)parallel vectors."""
    a_n, b_n = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    omega = torch.acos((a_n * b_n).sum(-1, keepdim=True).clamp(-1.0, 1.0))
    sin_omega = torch.sin(omega)
    t = t.reshape(-1, 1)
    linear = (1 - t) * a + t * b
    spherical = (torch.sin((1 - t) * omega) * a + torch.sin(t * omega) * b) / sin_omega.clamp_min(1e-7)
    return torch.where(sin_omega.abs() < 1e-6, linear, spherical)


def interpolation_latents(seed_a: int, seed_b: int, steps: int, z_dim: int, mode: str = "linear") -> torch.Tensor:
    """`steps` latents from seed_a's first vector to seed_b's, ends included."""
    a, b = latents(seed_a, 1, z_dim), latents(seed_b, 1, z_dim)
    t = torch.linspace(0, 1, steps)
    if mode == "spherical":
        return slerp(a.expand(steps, -1), b.expand(steps, -1), t)
    return (1 - t[:, None]) * a + t[:, None] * b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.sample",
                                     description="Write N generated images as float32 (N, C, H, W) in [-1, 1].")
    parser.add_argument("--run", required=True, help="run directory with generator.safetensors")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output .npy file")
    args = parser.parse_args(argv)
    if not 1 <= args.n <= MAX_SAMPLES:
        print(f"error: --n must be between 1 and {MAX_SAMPLES}", file=sys.stderr)
        return 2
    try:
        generator, meta = load_run_generator(args.run)
    except GeneratorFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    images = generate(generator, latents(args.seed, args.n, generator.z_dim)).astype(np.float32)
    np.save(args.out, images)
    print(f"wrote {args.out}: {images.shape} from step {meta.get('step')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
