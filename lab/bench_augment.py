"""Augmentation against none on the benchmark set at three sizes: steps to a quality target.

    python tools/build_benchmark_set.py --limit 300; python tools/build_benchmark_set.py --limit 1000
    python tools/build_benchmark_set.py
    python lab/bench_augment.py                       # 300, 1,000 and 3,641 images, 3 seeds (~50 min)
    python lab/bench_augment.py --sizes 300 --seeds 0 --steps 500    # a smoke run
    python lab/bench_augment.py --table runs.jsonl --target 35       # the table again, from --out's file
    python lab/bench_augment.py --choices on --out runs.jsonl        # only the augmented runs, beside old ones

Each run is the CLI trainer (`python -m core.train`, bench_speed.run_trainer) at the defaults on
a folder of the benchmark set (tools/build_benchmark_set.py), with `--augment on` or `--augment
off`, for --steps steps (1,000: a run of the page's defaults but half the length, its learning-rate
decay included, so that the 18 runs take about 35 minutes on 2 cores). The
trainer's own colour meter (core/quality.py SwdMeter: the sliced Wasserstein distance of the
fakes' small patches against the set's) is read every --every steps. The table gives, per size
and choice, the median over seeds of: the first step at which the meter is at or below --target,
the meter at a few steps, and its best. Steps, not seconds: the runs go --parallel at a time, one
torch thread each, so a step count is the figure that means the same on a busy machine.
What augmentation costs in time is left out here (bench_colour.py times runs).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

BENCHMARK_SETS = os.path.expanduser("~/.cache/blink/benchmark")
ALL_IMAGES = 3641


def set_folder(size: int) -> str:
    """The folder tools/build_benchmark_set.py writes for --limit size (all of it: no limit)."""
    return os.path.join(BENCHMARK_SETS, "noto-emoji" if size >= ALL_IMAGES else f"noto-emoji-{size}")


def one_run(size: int, augment: str, seed: int, steps: int, every: int) -> dict:
    from bench_speed import run_trainer
    args = ["--dataset", "folder", "--data-path", set_folder(size), "--augment", augment, "--seed", str(seed),
            "--steps", str(steps), "--quality-every", str(every), "--checkpoint-every", str(steps)]
    result = run_trainer(args, timeout=3600, env={"OMP_NUM_THREADS": "1"})
    curve = {e["step"]: e["quality_swd"] for e in result["events"] if "quality_swd" in e}
    return {"size": size, "augment": augment, "seed": seed, "curve": curve,
            "state": result["status"]["state"], "said": result["status"]["augment"]}


def first_at_or_below(curve: dict, target: float) -> int | None:
    return next((step for step, value in sorted(curve.items()) if value <= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 1000, ALL_IMAGES])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100, help="steps between meter readings")
    ap.add_argument("--target", type=float, default=30.0, help="the meter's quality target (lower is better)")
    ap.add_argument("--at", type=int, nargs="+", default=[200, 500, 1000], help="steps to show the meter at")
    ap.add_argument("--choices", nargs="+", default=["on", "off"], choices=["on", "off"],
                    help="which runs to train (e.g. on alone, beside an --out file that has the off runs)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--out", help="also write every run's curve here, one JSON line each")
    ap.add_argument("--table", help="print the table from a file --out wrote, training nothing")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            runs = [json.loads(line) for line in f]
        for run in runs:
            run["curve"] = {int(step): value for step, value in run["curve"].items()}
        args.sizes = sorted({r["size"] for r in runs})
        args.seeds = sorted({r["seed"] for r in runs})
        return print_table(runs, args)
    for size in args.sizes:
        if not os.path.isdir(set_folder(size)):
            sys.exit(f"{set_folder(size)} is missing: python tools/build_benchmark_set.py"
                     + ("" if size >= ALL_IMAGES else f" --limit {size}"))
    jobs = [(size, augment, seed) for size in args.sizes for seed in args.seeds for augment in args.choices]
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        runs = []
        for run in pool.map(lambda job: one_run(*job, args.steps, args.every), jobs):
            runs.append(run)
            if args.out:   # as they finish: a long bench stopped half-way keeps what it measured
                with open(args.out, "a") as f:
                    f.write(json.dumps(run) + "\n")
    print_table(runs, args)


def print_table(runs: list[dict], args) -> None:
    print(f"steps {args.steps}, meter every {args.every}, target {args.target:g}, seeds {args.seeds} (medians)")
    print(f"| images | augment | steps to <= {args.target:g} | " + " | ".join(f"at {s}" for s in args.at)
          + " | best |")
    print("|---|---|---|" + "---|" * len(args.at) + "---|")
    for size in args.sizes:
        for augment in ("on", "off"):
            mine = [r for r in runs if r["size"] == size and r["augment"] == augment]
            if not mine:
                continue
            reached = [first_at_or_below(r["curve"], args.target) for r in mine]
            hits = sorted(s for s in reached if s is not None)
            to_target = (f"{statistics.median(hits):.0f}" if len(hits) == len(mine) else
                         f"{len(hits)} of {len(mine)} reached it" + (f" ({', '.join(map(str, hits))})" if hits else ""))
            at = [statistics.median(r["curve"][s] for r in mine if s in r["curve"]) if all(s in r["curve"] for r in mine)
                  else float("nan") for s in args.at]
            best = statistics.median(min(r["curve"].values()) for r in mine)
            print(f"| {size:,} | {augment} | {to_target} | " + " | ".join(f"{v:.1f}" for v in at) + f" | {best:.1f} |")


if __name__ == "__main__":
    main()
