"""How far a long run gets: the quality ceiling, on a meter that can see it (issue 17).

    python lab/quality_ceiling.py ceiling --steps 8500 --minutes 10   # one long CLI run's quality curve
    python lab/quality_ceiling.py wide runs/a runs/b --batchnorm        # saved generators, wide meter

ceiling: the CLI trainer (bench_speed.run_trainer) at defaults (or with --set KEY=VALUE, --width)
for a run of --steps (8,500: about 10 minutes here, so that the default schedule's second-half
decay happens as it would in a run the user sized to 10 minutes), stopped through the run
directory if it is still going --minutes after its training loop began. It prints two curves:
the trainer's own meter (1,024 samples against 2,000 bundled digits every 200 steps) and a wide
meter scoring the generator the run saved at every checkpoint (10,000 samples against MNIST's
60,000 training digits, from --mnist), each with its floor: real test digits the run never saw,
scored the same way. The trainer's meter is cheap enough to run inside training time, but its
floor (1.7-3.7 over five draws) is where a good generator already is; the wide meter's is 0.33.

wide: the wide meter's fd of each run directory's saved generator (any runs: the same seed with
two --ema values trains the same G, so their difference is the average's alone). --batchnorm
also scores it with BatchNorm statistics recomputed from its own activations and in training
mode (batch statistics), to tell a statistics mismatch from the weights.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def read_idx_images(path: str) -> np.ndarray:
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).copy()


def read_idx_labels(path: str) -> np.ndarray:
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)


def fd_floor(meter, real: np.ndarray, n: int, draws: int) -> list[float]:
    """fd of `draws` random draws of n real digits the generator never saw: what a perfect
    generator would score on this meter (the estimate's own bias at these sample counts)."""
    rng = np.random.default_rng(0)
    return [meter.score_samples(real[rng.choice(len(real), n, replace=False)])["fd"] for _ in range(draws)]


def wide_meter(mnist: str, samples: int):
    """The meter that can resolve a good generator: `samples` fakes against MNIST's 60,000
    training digits, a conditional G asked in their class counts (floor 0.33 at 10,000)."""
    from core.quality import MnistMeter
    if not os.path.exists(os.path.join(mnist, "train-images-idx3-ubyte.gz")):
        sys.exit(f"The wide meter needs MNIST's .gz files in {mnist}: give their folder with --mnist.")
    train_images = read_idx_images(os.path.join(mnist, "train-images-idx3-ubyte.gz"))
    train_labels = read_idx_labels(os.path.join(mnist, "train-labels-idx1-ubyte.gz"))
    return MnistMeter(train_images, n_real=len(train_images), n_fake=samples, real_labels=train_labels)


def score_runs(args) -> None:
    import copy
    import torch
    from core.sample import load_run_generator
    meter = wide_meter(args.mnist, args.samples)
    for run in args.runs:
        generator, _ = load_run_generator(run)
        print(f"{run}: fd {meter.measure(generator, 'cpu')['fd']:.3f} (BatchNorm statistics as saved)", flush=True)
        if not args.batchnorm:
            continue
        standing = copy.deepcopy(generator)
        for module in standing.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.reset_running_stats()
                module.momentum = None   # a plain average over the batches below
        standing.train()
        latents, asked = meter.latents(generator.z_dim), meter.asked_labels(generator)
        torch.manual_seed(1)
        with torch.no_grad():
            for _ in range(100):   # batches of 128 in the asked mix, as training sees them
                pick = torch.randint(0, len(latents), (128,))
                standing(torch.randn(128, generator.z_dim), None if asked is None else asked[pick])
        print(f"{run}: fd {meter.measure(standing, 'cpu')['fd']:.3f} (statistics recomputed from its own "
              "activations, 100 batches)", flush=True)
        generator.train()
        images = torch.empty(len(latents), generator.channels, generator.resolution, generator.resolution)
        with torch.no_grad():
            for batch in torch.randperm(len(latents)).split(128):   # mixed-class batches, as in training
                images[batch] = generator(latents[batch], None if asked is None else asked[batch]).float()
        print(f"{run}: fd {meter.score_samples(images, asked)['fd']:.3f} (training mode: batch statistics)",
              flush=True)


def ceiling(args) -> None:
    from bench_speed import config_args, run_trainer
    from snapshot_trainer import trainer_keywords
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    from core.sample import load_run_generator
    wide = wide_meter(args.mnist, args.samples)
    test_images = read_idx_images(os.path.join(args.mnist, "t10k-images-idx3-ubyte.gz"))
    seconds = args.minutes * 60
    config = {"steps": args.steps, "seed": args.seed, **dict(kv.split("=", 1) for kv in args.set)}
    with tempfile.TemporaryDirectory(prefix="blink-bench-ceiling-") as snapshots:
        out = run_trainer(config_args(config), **trainer_keywords(snapshots, args.width),
                          stop_when=lambda event: event.get("time", 0) >= seconds, timeout=seconds + 300)
        curve = {e["step"]: e for e in out["events"] if "quality_fd" in e}
        if not curve:
            raise RuntimeError(f"no quality measurements: {out['status']}")
        # The trainer's meter (1,024 samples against 2,000 real digits, cheap enough to run inside
        # training time) has a floor near the values a good generator reaches; the wide one
        # separates them.
        checkpoints = {}
        for name in sorted(os.listdir(snapshots)):
            if name.startswith("checkpoint_"):
                generator, _ = load_run_generator(os.path.join(snapshots, name))
                checkpoints[int(name[len("checkpoint_"):])] = wide.measure(generator, "cpu")
    bundled = load_bundled_mnist()
    trainer_meter = MnistMeter(bundled.images, real_labels=bundled.labels)
    floors = {"trainer": fd_floor(trainer_meter, test_images, trainer_meter.n_fake, 5),
              "wide": fd_floor(wide, test_images, args.samples, 1)}
    print(f"trainer's meter (1,024 vs 2,000): curve every 200 steps; wide meter ({args.samples:,} vs "
          "60,000 training digits): the saved generator at every checkpoint")
    print("step time_s trainer_fd confident classes label_match | wide_fd wide_confident wide_label_match")
    for step in sorted(set(curve) | set(checkpoints)):
        e, w = curve.get(step), checkpoints.get(step)
        left = (f"{round(e['time'], 1)} {e['quality_fd']:.3f} {e['quality_confident']:.3f} {e['quality_classes']:.0f} "
                f"{e.get('quality_label_match', float('nan')):.3f}") if e else "- - - - -"
        right = f"{w['fd']:.3f} {w['confident']:.3f} {w['label_match']:.3f}" if w else "- - -"
        print(step, left, "|", right, flush=True)
    print("floor: real test digits (never trained on) scored the same way: trainer's meter "
          + ", ".join(f"{v:.2f}" for v in floors["trainer"]) + f"; wide meter {floors['wide'][0]:.2f}")
    for label, series in (("trainer's meter", {s: e["quality_fd"] for s, e in curve.items()}),
                          ("wide meter", {s: v["fd"] for s, v in checkpoints.items()})):
        near_2000 = min(series, key=lambda s: abs(s - 2000))
        last = max(series)
        print(f"{label}: fd at step {near_2000} {series[near_2000]:.2f}, at the end (step {last}) "
              f"{series[last]:.2f}: {series[near_2000] / series[last]:.2f}x lower (target >= 2x); "
              f"lowest {min(series.values()):.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    long_run = sub.add_parser("ceiling", help="one long CLI run's quality curve")
    long_run.add_argument("--minutes", type=float, default=10.0)
    long_run.add_argument("--seed", type=int, default=0)
    long_run.add_argument("--steps", type=int, default=8500, help="the run's length")
    long_run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="a config value other than the default (a candidate for the long run)")
    long_run.add_argument("--width", type=int, default=None, help="the fast preset's width (default 32)")
    score = sub.add_parser("wide", help="the wide meter's fd of saved generators")
    score.add_argument("runs", nargs="+", help="run directories (each with its generator.safetensors)")
    score.add_argument("--batchnorm", action="store_true",
                       help="also with recomputed BatchNorm statistics and in training mode")
    for mode in (long_run, score):
        mode.add_argument("--samples", type=int, default=10_000, help="samples the wide meter scores")
        mode.add_argument("--mnist", default=os.path.join(os.path.dirname(ROOT), "shared", "data", "mnist"),
                          help="folder with MNIST's four .gz files (train- and t10k-images-idx3-ubyte.gz)")
    args = parser.parse_args()
    {"ceiling": ceiling, "wide": score_runs}[args.mode](args)


if __name__ == "__main__":
    main()
