"""Quality at equal steps, commit against commit (issue 44): did a change cost quality per step?

    python bench/bench_quality_per_step.py --commits c3b02ea HEAD --steps 250 550 --seeds 0 1

For each seed and step count, each commit in turn trains the default CPU run from its own CLI (a
git worktree of the commit, `python -m core.train --device cpu --steps N --seed S`) to exactly N
steps, and this checkout's meter scores the generator the run saved (the EMA of G where the run has
one) as bench_digits.py does: 5,000 samples, classes 0-9 in turn, the shipped MNIST classifier's
Frechet distance against 2,000 real digits, the share it calls with p > 0.9 and the digits among
those. The commits take turns pair by pair, so a machine that slows down slows both alike; the
seconds each run took are printed beside its score, as a run's speed is another question.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_digits import SCORED_SAMPLES, score_run  # noqa: E402


def checkout(commit: str, into: str) -> str:
    """A worktree of `commit` under `into` (removed by the caller's cleanup)."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = os.path.join(into, sha)
    subprocess.run(["git", "worktree", "add", "--detach", "-q", path, sha], cwd=ROOT, check=True)
    return path


def train(tree: str, steps: int, seed: int, run: str) -> float:
    """The commit's own CLI, its defaults but the length and seed; the seconds it took."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "core.train", "--device", "cpu", "--steps", str(steps), "--seed", str(seed),
                    "--run-dir", run], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                   check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", nargs="+", default=["c3b02ea", "HEAD"])
    parser.add_argument("--steps", type=int, nargs="+", default=[250, 550])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    from core.data import load_bundled_mnist
    from core.quality import MnistMeter
    meter = MnistMeter(load_bundled_mnist().images, n_fake=SCORED_SAMPLES)
    scratch = tempfile.mkdtemp(prefix="blink-bench-quality-")
    trees = {}
    try:
        for commit in args.commits:
            trees[commit] = checkout(commit, scratch)
        rows = []
        for steps in args.steps:
            for seed in args.seeds:
                for commit, tree in trees.items():
                    run = os.path.join(scratch, f"run-{os.path.basename(tree)}-{steps}-{seed}")
                    seconds = train(tree, steps, seed, run)
                    values = score_run(run, meter)
                    rows.append({"commit": commit, "steps": steps, "seed": seed, "seconds": seconds, **values})
                    print(f"{commit} ({os.path.basename(tree)}), {steps} steps, seed {seed}: fd {values['fd']:.1f}, "
                          f"confident {values['confident']:.3f}, classes {values['classes']:.0f} "
                          f"({seconds:.0f} s)", flush=True)
        print("\n| steps | " + " | ".join(f"{c} fd (seeds)" for c in args.commits) + " | ratio, pair by pair |")
        print("|---|" + "---|" * (len(args.commits) + 1))
        for steps in args.steps:
            cells = []
            fds = {c: [r["fd"] for r in rows if r["commit"] == c and r["steps"] == steps] for c in args.commits}
            for commit in args.commits:
                cells.append(f"{statistics.median(fds[commit]):.1f} ({', '.join(f'{v:.1f}' for v in fds[commit])})")
            first, last = args.commits[0], args.commits[-1]
            ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(fds[first], fds[last]))
            print(f"| {steps} | " + " | ".join(cells) + f" | {last}/{first}: {ratios} |")
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)
        shutil.rmtree(scratch, ignore_errors=True)   # the runs too: their scores are printed


if __name__ == "__main__":
    main()
