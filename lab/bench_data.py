"""Data-wait share of GAN step time: a naive loader versus Blink's cached BatchStream.

    python lab/bench_data.py [--steps 30] [--images 2000] [--workers 0]

Two workloads, each trained for the same steps with the real models from core.models:
  * MNIST (the real 60k IDX files in ../shared/data/mnist), preset "fast" at 28x28, batch 64.
  * 64x64 own images: synthetic JPEGs of mixed sizes in a temp folder, preset "dcgan64", batch 64.
For each (steps interleaved across pipelines, see compare()): BEFORE = a torchvision-style Dataset + DataLoader that decodes/transforms per item
(ToTensor/Normalize for MNIST; open, Resize(64), CenterCrop(64) for the folder), AFTER = Blink's
decoded-once cache + BatchStream, and AFTER + a one-batch background prefetch thread (to decide
whether BatchStream should prefetch on non-CUDA devices). It prints the share of step time spent
waiting for data, the ratio before/after, and the one-time cost of building the cache.
Everything runs on the CPU and in temp folders (BLINK_DATA_DIR is pointed at one).
"""
from __future__ import annotations

import argparse
import gzip
import os
import queue
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
MNIST_DIR = os.path.join(os.path.dirname(ROOT), "shared", "data", "mnist")


class Trainer:
    """The trainer's own step (core/step.py GanStep: one D and one G update, D frozen for G's),
    fed from one pipeline; the step's wait for the next batch is timed apart."""

    def __init__(self, batches, preset: str, channels: int, resolution: int):
        import torch
        from core import devices, gans, losses, models, runtime
        from core.step import GanStep
        torch.manual_seed(0)
        self.batches, self.shape = batches, (channels, resolution, resolution)
        G, D = models.build(gans.get("dcgan"), preset, channels, resolution, 100)
        opt_g = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
        self.step_fn = GanStep(G, D, opt_g, opt_d, losses.make_loss(gans.get("dcgan")), runtime.Runtime(devices.probe("cpu")))
        self.data_s = self.total_s = 0.0
        self.steps = 0

    def next_with_labels(self):
        """The batch source GanStep reads: unlabelled batches from any iterator of tensors."""
        real = next(self.batches)
        assert real.shape[1:] == self.shape, real.shape
        return real, None

    def step(self, timed: bool) -> None:
        t0, waited = time.perf_counter(), self.step_fn.data_seconds
        self.step_fn(self)
        if timed:
            self.data_s += self.step_fn.data_seconds - waited
            self.total_s += time.perf_counter() - t0
            self.steps += 1

    def result(self) -> dict:
        return dict(share=self.data_s / self.total_s, data_ms=1000 * self.data_s / self.steps,
                    step_ms=1000 * self.total_s / self.steps)


def compare(pipelines: dict, preset: str, channels: int, resolution: int, steps: int, warmup: int = 3) -> list:
    """Steps of the pipelines interleaved (A, B, C, A, B, C, ...): load from other processes on
    the machine then slows all of them alike, so the ratios stay fair on a busy machine."""
    trainers = {name: Trainer(batches, preset, channels, resolution) for name, batches in pipelines.items()}
    for i in range(warmup + steps):
        for trainer in trainers.values():
            trainer.step(timed=i >= warmup)
    return [(name, t.result()) for name, t in trainers.items()]


def endless(loader):
    while True:
        yield from loader


def prefetched(stream, depth: int = 1):
    """The next batch is prepared in a thread while the model computes on the current one."""
    q: queue.Queue = queue.Queue(maxsize=depth)

    def fill():
        while True:
            q.put(next(stream))
    threading.Thread(target=fill, daemon=True).start()
    while True:
        yield q.get()


class ImageFiles:
    """The usual torchvision-style folder dataset: decode + resize + crop every time."""

    def __init__(self, folder: str):
        from torchvision import transforms
        self.paths = sorted(os.path.join(folder, f) for f in os.listdir(folder))
        self.transform = transforms.Compose([
            transforms.Resize(64), transforms.CenterCrop(64), transforms.ToTensor(),
            transforms.Normalize((0.5,) * 3, (0.5,) * 3)])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.paths[i]) as img:
            return self.transform(img.convert("RGB")), 0


def synthetic_jpegs(folder: str, n: int) -> None:
    """Smooth random colour fields (photo-like JPEG sizes), 80..200 px on each side."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(n):
        w, h = (int(v) for v in rng.integers(80, 201, 2))
        small = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(
            os.path.join(folder, f"{i:05d}.jpg"), quality=90)


def report(title: str, rows: list[tuple[str, dict]]) -> None:
    print(f"\n{title}")
    print(f"  {'pipeline':<34}{'data wait share':>16}{'data ms/step':>14}{'step ms':>10}")
    for name, r in rows:
        print(f"  {name:<34}{100 * r['share']:>15.1f}%{r['data_ms']:>14.2f}{r['step_ms']:>10.1f}")
    before, after = rows[0][1], rows[1][1]
    print(f"  -> data wait share {100 * before['share']:.1f}% -> {100 * after['share']:.2f}% "
          f"({before['share'] / max(after['share'], 1e-9):.0f}x less); data time per step "
          f"{before['data_ms'] / max(after['data_ms'], 1e-9):.0f}x less; step time "
          f"{before['step_ms'] / after['step_ms']:.2f}x faster")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)   # progress shows up when piped to a file
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers of the naive loader")
    args = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    tmp = tempfile.mkdtemp(prefix="blink-bench-data-")
    os.environ["BLINK_DATA_DIR"] = os.path.join(tmp, "cache")
    from core import data
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
          f"batch 64, {args.steps} timed steps after 3 warm-up; naive DataLoader workers={args.workers}")
    try:
        # ---- MNIST ---------------------------------------------------------------------------
        raw = os.path.join(tmp, "naive", "MNIST", "raw")
        os.makedirs(raw)
        for name in os.listdir(MNIST_DIR):
            with gzip.open(os.path.join(MNIST_DIR, name)) as src, open(os.path.join(raw, name[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst)
        naive = datasets.MNIST(os.path.join(tmp, "naive"), train=True, download=False,
                               transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))]))
        loader = DataLoader(naive, batch_size=64, shuffle=True, drop_last=True, num_workers=args.workers)
        t0 = time.perf_counter()
        mnist = data.load("mnist", MNIST_DIR)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        mnist = data.load("mnist")
        second = time.perf_counter() - t0
        rows = compare({
            "before: MNIST Dataset + DataLoader": (b for b, _ in endless(loader)),
            "after: cached BatchStream": data.BatchStream(mnist.images, 64, "cpu"),
            "after + prefetch thread": prefetched(data.BatchStream(mnist.images, 64, "cpu", seed=1)),
        }, "fast", 1, 28, args.steps)
        report(f"MNIST, preset fast (28x28): cache built once in {first:.1f} s "
               f"({len(mnist)} images), loaded again in {second * 1000:.0f} ms", rows)

        # ---- a 64x64 image folder -----------------------------------------------------------
        folder = os.path.join(tmp, "jpegs")
        os.makedirs(folder)
        synthetic_jpegs(folder, args.images)
        loader = DataLoader(ImageFiles(folder), batch_size=64, shuffle=True, drop_last=True, num_workers=args.workers)
        t0 = time.perf_counter()
        own = data.load("folder", folder)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        own = data.load("folder", folder)
        second = time.perf_counter() - t0
        rows = compare({
            "before: ImageFolder-style + DataLoader": (b for b, _ in endless(loader)),
            "after: cached BatchStream": data.BatchStream(own.images, 64, "cpu"),
            "after + prefetch thread": prefetched(data.BatchStream(own.images, 64, "cpu", seed=1)),
        }, "dcgan64", 3, 64, args.steps)
        report(f"{args.images} JPEGs (80-200 px) -> 64x64, preset dcgan64: cache built once in {first:.1f} s, "
               f"loaded again in {second * 1000:.0f} ms", rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
