"""Prototype candidates for the CPU default that the trainer cannot express yet, in a bare loop.

    OMP_NUM_THREADS=1 python lab/proto_candidates.py NAME [--gw 64] [--dw 32] [--batch 64]
        [--gan dcgan|hinge] [--lr 1e-3] [--betas 0.5,0.999] [--smooth 0.9] [--extra-conv]
        [--steps 1150] [--at 300,500,650,800,1000,1150]

The step is the trainer's own (core/step.py GanStep: a D update on a fresh fake, then G on the
same fake with D frozen), with core.models / core.losses objects and the same BatchStream, so
steps-to-quality match the trainer's. Extras the trainer lacks, measured here first:
  --gw/--dw     separate G and D widths
  --extra-conv  G ends 7->14->28 with ConvT to width/2 channels, BN, ReLU, then a 3x3 conv to nc
  --smooth p    one-sided label smoothing: D's real target p instead of 1 (non-saturating loss)
  EMA of G      always tracked (decays 0.99 and 0.995, buffers averaged too) and scored beside G;
                it changes nothing in training
At each step in --at, G and its EMAs are scored with the shipped classifier (eval-mode BatchNorm,
what the grids and the meter use). FLOPs/step are counted once (FlopCounterMode, fwd+bwd).
Prints one JSON line per scored step, prefixed RESULT.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch
import torch.nn.functional as F
from torch import nn

from core import data, devices, gans, losses, models, quality, runtime
from core.step import GanStep


class ExtraConvGenerator(models.Generator):
    """The fast G with its last ConvT producing width/2 feature maps at full size, then a 3x3 conv."""

    def __init__(self, spec: models.GeneratorSpec):
        super().__init__(spec)
        layers = list(self.net.children())[:-1]
        last = list(self.net.children())[-1]
        ch = last.in_channels
        layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), models.FP32BatchNorm2d(ch // 2), nn.ReLU(True),
                   nn.Conv2d(ch // 2, spec.channels, 3, 1, 1)]
        self.net = nn.Sequential(*layers)


class SmoothedNonSaturating(losses.NonSaturating):
    def __init__(self, real_label: float):
        self.real_label = real_label

    def discriminator_loss(self, D, real, fake, labels=None):   # unconditional: labels unused
        real_logits, fake_logits = D(real).float(), D(fake.detach()).float()
        loss = (F.binary_cross_entropy_with_logits(real_logits, torch.full_like(real_logits, self.real_label))
                + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits)))
        return loss, {}


def flops_per_step(G, D, loss, rt, batches):
    """FLOPs of one step (FlopCounterMode) on copies of G and D, so training starts untouched."""
    from torch.utils.flop_counter import FlopCounterMode
    G, D = copy.deepcopy(G), copy.deepcopy(D)
    step = GanStep(G, D, torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters()), loss, rt)
    with FlopCounterMode(display=False) as counter:
        step(batches)
    return counter.get_total_flops()


@torch.no_grad()
def ema_update(ema, model, decay):
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p, 1 - decay)
    for e, b in zip(ema.buffers(), model.buffers()):
        if e.dtype.is_floating_point:
            e.lerp_(b, 1 - decay)
        else:
            e.copy_(b)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--gw", type=int, default=32)
    p.add_argument("--dw", type=int, default=32)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--gan", default="dcgan")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-d", type=float, default=None)
    p.add_argument("--betas", default="0.5,0.999")
    p.add_argument("--smooth", type=float, default=None)
    p.add_argument("--extra-conv", action="store_true")
    p.add_argument("--steps", type=int, default=1150)
    p.add_argument("--at", default="300,500,650,800,1000,1150")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    at = {int(s) for s in a.at.split(",")}
    betas = tuple(float(b) for b in a.betas.split(","))
    torch.manual_seed(a.seed)
    ds = data.load("bundled-mnist")
    stream = data.BatchStream(ds.images, a.batch, torch.device("cpu"), seed=a.seed)
    spec = models.GeneratorSpec(100, ds.channels, ds.resolution, a.gw)
    G = ExtraConvGenerator(spec) if a.extra_conv else models.Generator(spec)
    norm, spectral = (gans.get(a.gan).d_norm, gans.get(a.gan).spectral)
    D = models.Discriminator(ds.channels, ds.resolution, a.dw, norm, spectral)
    G.apply(models.init_weights)
    D.apply(models.init_weights)
    loss = SmoothedNonSaturating(a.smooth) if a.smooth is not None else losses.make_loss(gans.get(a.gan))
    opt_g = torch.optim.Adam(G.parameters(), lr=a.lr, betas=betas)
    opt_d = torch.optim.Adam(D.parameters(), lr=a.lr_d or a.lr, betas=betas)
    rt = runtime.Runtime(devices.probe("cpu"))
    flops = flops_per_step(G, D, loss, rt, data.BatchStream(ds.images, a.batch, "cpu", seed=99))
    gan_step = GanStep(G, D, opt_g, opt_d, loss, rt, z_dim=100)
    emas = {d: copy.deepcopy(G) for d in (0.99, 0.995)}
    meter = quality.default_mnist_meter()
    latents = meter.latents(100)
    t0 = time.perf_counter()
    train_s = 0.0
    for step in range(1, a.steps + 1):
        ts = time.perf_counter()
        values = gan_step(stream)
        for d, e in emas.items():
            ema_update(e, G, d)
        train_s += time.perf_counter() - ts
        if step in at:
            row = {"name": a.name, "step": step, "gflop_per_step": flops / 1e9, "train_s": round(train_s, 1),
                   "loss_d": float(values["loss_d"]), "loss_g": float(values["loss_g"])}
            for label, net in (("G", G), *((f"ema{d}", e) for d, e in emas.items())):
                v = meter.score_samples(quality.generate(net, latents, "cpu"))
                row[label] = {k: round(v[k], 3) for k in ("confident", "classes", "fd")}
            print("RESULT " + json.dumps(row), flush=True)
    print(f"done {a.name} in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
