"""How the CPU defaults were chosen: train candidates with the real trainer, score them offline.

    python lab/tune_defaults.py run OUT NAME --width 32 --set batch_size=64 --set lr_g=2e-4 ...
    python lab/tune_defaults.py score OUT

`run` trains one candidate with core.train (the bench's trainer child) and keeps G's weights at
every grid step (grid_every=50 here). `score` scores every snapshot with core.quality in eval-mode
BatchNorm (running statistics: what the app's grids and the meter use) and in train-mode
BatchNorm (batch statistics), and prints, per candidate, the first step and training second at
which samples are recognisable (core.quality.recognizable), plus steps/s.

Scoring offline separates the two things a shared machine mixes up: the number of steps a
candidate needs (a property of the optimisation, independent of machine load) and its
steps/s (measured separately, back to back, by bench_speed.py-style runs).
"""
from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def run(args) -> None:
    from bench_speed import config_args, run_trainer
    from snapshot_trainer import trainer_keywords
    folder = os.path.join(args.out, args.name)
    os.makedirs(folder, exist_ok=True)
    settings = dict(kv.split("=", 1) for kv in args.set)
    settings.update(steps=args.steps, grid_every=50, seed=args.seed)
    out = run_trainer(config_args(settings), **trainer_keywords(os.path.abspath(folder), args.width), timeout=3000)
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump({"settings": settings, "width": args.width, "startup_seconds": out["startup_seconds"],
                   "events": out["events"], "status": out["status"].get("message")}, f)
    print(args.name, out["status"].get("message"), f"startup {out['startup_seconds']:.1f} s")


def score(args) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from core import models, quality
    meter = quality.default_mnist_meter()
    latents = meter.latents(100)
    for folder in sorted(glob.glob(os.path.join(args.out, "*"))):
        files = sorted(glob.glob(os.path.join(folder, "G_*.safetensors")))
        if not files:
            continue
        first = {"eval": None, "train": None}
        rows = []
        for path in files:
            with safe_open(path, "pt") as f:
                meta = f.metadata()
            spec = models.GeneratorSpec(100, 1, 28, int(meta["width"]))
            G = models.Generator(spec)
            G.load_state_dict(load_file(path))
            row = [int(meta["step"]), float(meta["time"])]
            for mode in ("eval", "train"):
                with torch.no_grad():
                    if mode == "eval":
                        images = quality.generate(G, latents, "cpu")
                    else:   # batch statistics, on a copy so the running statistics stay untouched
                        g = copy.deepcopy(G).train()
                        images = torch.cat([g(z) for z in latents.split(250)])
                v = meter.score_samples(images)
                row.append(v)
                if first[mode] is None and quality.recognizable(v):
                    first[mode] = (row[0], row[1])
            rows.append(row)
        print(f"== {os.path.basename(folder)}: first recognisable (step, train s): eval-BN {first['eval']}, "
              f"train-BN {first['train']}")
        for step, t, ev, tr in rows:
            print(f"   step {step:5d} t {t:6.1f}s  eval conf {ev['confident']:.3f} cls {ev['classes']:.0f} fd {ev['fd']:7.2f}"
                  f" | train conf {tr['confident']:.3f} cls {tr['classes']:.0f} fd {tr['fd']:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("name")
    r.add_argument("--width", type=int, default=None)
    r.add_argument("--set", action="append", default=[])
    r.add_argument("--steps", type=int, default=1500)
    r.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("score")
    s.add_argument("out")
    args = parser.parse_args()
    run(args) if args.cmd == "run" else score(args)


if __name__ == "__main__":
    main()
