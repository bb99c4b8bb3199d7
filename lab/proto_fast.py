"""Second round of fast-preset prototypes: what gets the CPU model past ~0.6 `confident`.

    OMP_NUM_THREADS=1 python lab/proto_fast.py NAME [options] [--steps 1200] [--at 400,800,1200]

A bare loop with its own small G and D so that structure can vary freely; the step is the
trainer's own (core/step.py GanStep: D on a fresh fake, then G on the same fake with D frozen),
with the candidate's loss (ProtoLoss: augmentation, R1) as its loss object; the data is
core.data's BatchStream over the bundled MNIST, and scoring is the shipped classifier
(core.quality, eval-mode BatchNorm, the meter's fixed latents). With --cond the fakes draw the
real batch's classes, as the trainer's step does (before core/step.py this bench drew them
apart, uniformly: figures from then are not comparable for --cond). Options:
  --gw/--dw        G and D widths (G: 2gw ch at 7x7 -> gw at 14x14 -> 1 at 28x28; D mirrors)
  --dnorm          D's normalisation after its second conv: batch | none | layer
  --d-extra        a third D conv (3x3 stride 2 to 4*dw channels at 4x4, BN) before the logit
  --extra-conv     G ends with ConvT to gw/2 channels at 28x28, BN, ReLU, then a 3x3 conv to 1
  --sn             spectral norm on every D layer
  --dropout p      dropout after each D activation
  --r1 g[,k]       R1 penalty gamma g on real images every k steps (lazy, scaled by k)
  --loss           ns | hinge | rp (relativistic pairing, R3GAN's; pair it with --r1)
  --decay f        linear lr decay from lr to f*lr over --steps
  --decay-from s   ... starting at step s (constant before: CycleGAN's schedule with s = steps/2)
  --aug translate  DiffAugment-style random 1/8 translation of real and fake before D
  --lr/--lr-d/--betas/--batch
  --ema d[,d2,...] EMAs of G, each scored beside G (one decay: key "ema"; several: "ema<d>")
  --ema-rampup     decay_t = min(d, (1+t)/(10+t)) at step t, so an early EMA is not stuck near init
  --warmup n       lr rises linearly from lr/n to lr over the first n steps
  --cosine f       cosine lr decay from lr to f*lr over --horizon steps (default --steps)
  --joint-d        D's update on the real and the fake batch as one batch of twice the size
  --production     G and D from core.models.build (the trainer's fast preset, NHWC, fused Adam) and
                   the trainer's batches (core.data.BatchStream with labels); needs --cond, no
                   structure flags: checks that this bench's base is the product's model
  --at a,b,...     steps to score, or first:last:every (200:900:50)
  --until c        stop after the first scored step where G and every EMA are >= c confident with
                   10 classes and label_acc >= 0.85 (else run --steps)
Prints one JSON line per scored step, prefixed RESULT (G and its EMAs, and the GFLOP of one
training step, fwd+bwd, counted by torch.utils.flop_counter on step 1).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from core import data, devices, gans, models, quality, runtime
from core.step import GanStep

STRUCTURE_FLAGS = ("gw", "dw", "dnorm", "sn", "dropout", "mbstd", "extra_conv", "d_extra")


class G(nn.Module):
    def __init__(self, z_dim, width, extra_conv=False, classes=0):
        super().__init__()
        self.z_dim, c0, c1 = z_dim, 2 * width, width
        self.c0, self.classes = c0, classes
        self.fc = nn.Linear(z_dim + classes, c0 * 49, bias=False)
        self.bn0 = models.FP32BatchNorm2d(c0)
        layers = [nn.ConvTranspose2d(c0, c1, 4, 2, 1, bias=False), models.FP32BatchNorm2d(c1), nn.ReLU(True)]
        if extra_conv:
            layers += [nn.ConvTranspose2d(c1, c1 // 2, 4, 2, 1, bias=False), models.FP32BatchNorm2d(c1 // 2),
                       nn.ReLU(True), nn.Conv2d(c1 // 2, 1, 3, 1, 1)]
        else:
            layers += [nn.ConvTranspose2d(c1, 1, 4, 2, 1, bias=False)]
        self.net = nn.Sequential(*layers)

    def forward(self, z, y=None):
        z = z.flatten(1)
        if self.classes:
            z = torch.cat([z, F.one_hot(y, self.classes).float()], 1)
        x = F.relu(self.bn0(self.fc(z).view(-1, self.c0, 7, 7)))
        return torch.tanh(self.net(x))


class MinibatchStd(nn.Module):
    def forward(self, x):
        s = x.std(0).mean().expand(x.size(0), 1, x.size(2), x.size(3))
        return torch.cat([x, s], 1)


class D(nn.Module):
    def __init__(self, width, norm, sn, dropout, mbstd, extra=False, classes=0):
        super().__init__()
        self.embed = nn.Embedding(classes, 2 * width) if classes else None
        if classes:
            nn.init.normal_(self.embed.weight, 0.0, 0.02)
        w = nn.utils.parametrizations.spectral_norm if sn else (lambda m: m)
        drop = [nn.Dropout(dropout)] if dropout else []
        norm_layer = {"batch": models.FP32BatchNorm2d(2 * width), "none": nn.Identity(),
                      "layer": nn.GroupNorm(1, 2 * width)}[norm]
        self.net = nn.Sequential(
            w(nn.Conv2d(1, width, 4, 2, 1)), nn.LeakyReLU(0.2, True), *drop,
            w(nn.Conv2d(width, 2 * width, 4, 2, 1)), norm_layer, nn.LeakyReLU(0.2, True), *drop,
            *([w(nn.Conv2d(2 * width, 4 * width, 3, 2, 1)), models.FP32BatchNorm2d(4 * width),
               nn.LeakyReLU(0.2, True)] if extra else []),
            *([MinibatchStd()] if mbstd else []),
            w(nn.Conv2d((4 if extra else 2) * width + mbstd, 1, 4 if extra else 7, 1, 0)))

    def forward(self, x, y=None):
        if self.embed is None:
            return self.net(x).flatten()
        h = self.net[:-1](x)   # projection discriminator (Miyato & Koyama 2018) on the last features
        features = h[:, :self.embed.embedding_dim]   # without the minibatch-std channel (--mbstd)
        return self.net[-1](h).flatten() + (features.sum((2, 3)) * self.embed(y)).sum(1)


def translate(x, ratio=0.125):
    """DiffAugment's translation: shift each image by up to ratio*size pixels, zero padded."""
    b, _, h, w = x.shape
    sh, sw = int(h * ratio + 0.5), int(w * ratio + 0.5)
    pad = F.pad(x, (sw, sw, sh, sh))
    dy = torch.randint(0, 2 * sh + 1, (b,))
    dx = torch.randint(0, 2 * sw + 1, (b,))
    rows = (dy[:, None] + torch.arange(h)[None])[:, None, :, None].expand(b, x.size(1), h, w + 2 * sw)
    out = pad.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, None, :].expand(b, x.size(1), h, w)
    return out.gather(3, cols)


def init(m):
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
        p = getattr(m, "parametrizations", None)
        nn.init.normal_(p.weight.original if p is not None else m.weight, 0.0, 0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class ProtoLoss:
    """The candidates' losses in core.losses' contract, so GanStep can train with them."""

    def __init__(self, kind: str, aug, r1_gamma: float = 0.0, r1_every: int = 1, joint: bool = False):
        self.kind, self.aug, self.r1_gamma, self.r1_every = kind, aug, r1_gamma, r1_every
        self.joint = joint   # D on the real and the fake batch as one batch (one pass; BatchNorm over both)
        self.steps = 0   # discriminator updates so far: the lazy R1 runs every r1_every of them

    def discriminator_loss(self, D, real, fake, labels=None):
        self.steps += 1
        if self.joint:
            both = D(self.aug(torch.cat([real, fake.detach()])),
                     None if labels is None else torch.cat([labels, labels])).float()
            rl, fl = both[:len(real)], both[len(real):]
        else:
            rl, fl = D(self.aug(real), labels).float(), D(self.aug(fake.detach()), labels).float()
        self.real = real   # the relativistic G loss compares its fakes with this batch
        if self.kind == "hinge":
            loss = (1 - rl).clamp_min(0).mean() + (1 + fl).clamp_min(0).mean()
        elif self.kind == "rp":   # relativistic pairing (R3GAN's RpGAN): each real against a fake
            loss = F.softplus(-(rl - fl)).mean()
        else:
            loss = F.softplus(-rl).mean() + F.softplus(fl).mean()
        if self.r1_gamma and self.steps % self.r1_every == 0:
            x = real.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(D(self.aug(x), labels).sum(), x, create_graph=True)
            loss = loss + 0.5 * self.r1_gamma * self.r1_every * grad.pow(2).flatten(1).sum(1).mean()
        return loss, {}

    def generator_loss(self, D, fake, labels=None):
        logits = D(self.aug(fake), labels).float()
        if self.kind == "rp":   # a fourth pass of D, on the real batch again
            return F.softplus(-(logits - D(self.aug(self.real), labels).float())).mean(), {}
        return (-logits.mean() if self.kind == "hinge" else F.softplus(-logits).mean()), {}


class LabelledSamples:
    """Random labelled batches of the bundled MNIST (with replacement), for --cond."""

    def __init__(self, images, labels, batch: int, seed: int):
        self.images, self.labels, self.batch = images, labels, batch
        self.generator = torch.Generator().manual_seed(seed)

    def next_with_labels(self):
        idx = torch.randint(0, len(self.images), (self.batch,), generator=self.generator)
        return data.to_model_range(self.images[idx]), self.labels[idx]


def scored_steps(spec: str) -> set[int]:
    """'200,400' or '200:900:50' (first:last:every, last included)."""
    if ":" in spec:
        first, last, every = (int(v) for v in spec.split(":"))
        return set(range(first, last + 1, every))
    return {int(s) for s in spec.split(",")}


def lr_factor(step: int, warmup: int, cosine: float | None, horizon: int) -> float:
    """The lr multiplier at `step` (0-based, as LambdaLR counts): linear warm-up, then cosine."""
    f = min(1.0, (step + 1) / warmup) if warmup else 1.0
    if cosine is not None:
        f *= cosine + (1 - cosine) * 0.5 * (1 + math.cos(math.pi * min(step, horizon) / horizon))
    return f


def reached(v: dict, target: float) -> bool:
    return v["confident"] >= target and v["classes"] == 10 and v.get("label_acc", 1.0) >= 0.85


@torch.no_grad()
def ema_update(ema, model, decay):
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p, 1 - decay)
    for e, b in zip(ema.buffers(), model.buffers()):
        e.copy_(b)   # running BatchNorm statistics: the live ones


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--gw", type=int, default=32)
    p.add_argument("--dw", type=int, default=32)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--loss", default="ns")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-d", type=float, default=None)
    p.add_argument("--betas", default="0.5,0.999")
    p.add_argument("--dnorm", default="batch")
    p.add_argument("--sn", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--mbstd", action="store_true")
    p.add_argument("--r1", default=None)
    p.add_argument("--decay", type=float, default=None)
    p.add_argument("--decay-from", type=int, default=0)
    p.add_argument("--aug", default=None)
    p.add_argument("--extra-conv", action="store_true")
    p.add_argument("--d-extra", action="store_true")
    p.add_argument("--cond", action="store_true")
    p.add_argument("--zdim", type=int, default=100)
    p.add_argument("--ema", default="0.99")
    p.add_argument("--ema-rampup", action="store_true")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--cosine", type=float, default=None)
    p.add_argument("--horizon", type=int, default=None)
    p.add_argument("--production", action="store_true")
    p.add_argument("--joint-d", action="store_true")
    p.add_argument("--until", type=float, default=None)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--at", default="400,800,1200")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wide", default=None, metavar="MNIST_DIR",
                   help="score 10,000 samples against MNIST's 60,000 training digits (lab/quality_ceiling.py ceiling's meter)")
    a = p.parse_args()
    at = scored_steps(a.at)
    decays = [float(d) for d in a.ema.split(",")]
    if a.production:
        changed = [f for f in STRUCTURE_FLAGS if getattr(a, f) != p.get_default(f)]
        if not a.cond or changed:
            p.error(f"--production needs --cond and none of: {', '.join(changed) or 'structure flags'}")
    betas = tuple(float(b) for b in a.betas.split(","))
    torch.manual_seed(a.seed)
    ds = data.load("bundled-mnist")
    nc = 10 if a.cond else 0
    if a.production:   # as core/train.py Loop builds them for the fast preset on a CPU
        batches = data.BatchStream(ds.images, a.batch, torch.device("cpu"), seed=a.seed, labels=ds.labels)
        g, d = models.build(gans.get("dcgan"), "fast", 1, 28, a.zdim, nc)
        g.to(memory_format=torch.channels_last)
        d.to(memory_format=torch.channels_last)
    else:
        batches = (LabelledSamples(ds.images, ds.labels, a.batch, a.seed) if nc
                   else data.BatchStream(ds.images, a.batch, torch.device("cpu"), seed=a.seed))
        g, d = G(a.zdim, a.gw, a.extra_conv, nc), D(a.dw, a.dnorm, a.sn, a.dropout, a.mbstd, a.d_extra, nc)
        g.apply(init)
        d.apply(init)
    fused = {"fused": True} if a.production else {}
    opt_g = torch.optim.Adam(g.parameters(), lr=a.lr, betas=betas, **fused)
    opt_d = torch.optim.Adam(d.parameters(), lr=a.lr_d or a.lr, betas=betas, **fused)
    scheds = []
    if a.decay is not None:
        f = lambda s: 1 - (1 - a.decay) * max(0, min(s, a.steps) - a.decay_from) / (a.steps - a.decay_from)
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, f) for o in (opt_g, opt_d)]
    if a.warmup or a.cosine is not None:
        f = lambda s: lr_factor(s, a.warmup, a.cosine, a.horizon or a.steps)
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, f) for o in (opt_g, opt_d)]
    r1_gamma, r1_every = (float(a.r1.split(",")[0]), int((a.r1.split(",") + ["1"])[1])) if a.r1 else (0.0, 1)
    aug = translate if a.aug == "translate" else (lambda x: x)
    gan_step = GanStep(g, d, opt_g, opt_d, ProtoLoss(a.loss, aug, r1_gamma, r1_every, a.joint_d),
                       runtime.Runtime(devices.probe("cpu")), z_dim=a.zdim)
    emas = {("ema" if len(decays) == 1 else f"ema{decay:g}"): (copy.deepcopy(g), decay) for decay in decays}
    if a.wide:
        from quality_ceiling import wide_meter
        meter = wide_meter(a.wide, 10_000)
    else:
        meter = quality.default_mnist_meter()
    latents = meter.latents(a.zdim)
    t0 = time.perf_counter()
    train_s = 0.0
    gflop_step = None
    for step in range(1, a.steps + 1):
        ts = time.perf_counter()
        if gflop_step is None:   # step 1, counted as it trains (the counter only observes)
            with FlopCounterMode(display=False) as counter:
                values = gan_step(batches)
            gflop_step = round(counter.get_total_flops() / 1e9, 3)
        else:
            values = gan_step(batches)
        for s in scheds:
            s.step()
        for ema, decay in emas.values():
            ema_update(ema, g, min(decay, (1 + step) / (10 + step)) if a.ema_rampup else decay)
        train_s += time.perf_counter() - ts
        if step in at:
            row = {"name": a.name, "step": step, "train_s": round(train_s, 1), "gflop_step": gflop_step,
                   "loss_d": round(float(values["loss_d"]), 3), "loss_g": round(float(values["loss_g"]), 3)}
            for label, net in [("G", g)] + [(k, e) for k, (e, _) in emas.items()]:
                if nc:
                    # the digits in turn (the tables so far); --wide: in the training set's proportions
                    ys = meter.asked_labels(net) if a.wide else torch.arange(len(latents)) % nc
                    net.eval()
                    with torch.no_grad():
                        images = torch.cat([net(z, y) for z, y in zip(latents.split(512), ys.split(512))])
                    net.train()
                    v = meter.score_samples(images, asked=ys)
                    v["label_acc"] = v.pop("label_match")
                else:
                    v = meter.score_samples(quality.generate(net, latents, "cpu"))
                row[label] = {k: round(v[k], 3) for k in ("confident", "classes", "fd", "label_acc") if k in v}
            print("RESULT " + json.dumps(row), flush=True)
            if a.until is not None and all(reached(row[k], a.until) for k in ["G", *emas]):
                break
    print(f"done {a.name} in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
