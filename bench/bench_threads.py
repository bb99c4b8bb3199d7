"""Does the default CPU model train faster on 1 torch thread or on all of them?

    python bench/bench_threads.py                 # defaults, 3 interleaved pairs of 200 steps
    python bench/bench_threads.py --threads 1 2 --steps 200 --pairs 3 --set batch_size=128 --width 48

Runs bench_speed.py's bare loop (the trainer's model, loss, optimizers and batch stream, nothing
around them) in fresh processes with torch.set_num_threads(N), the thread counts interleaved so
a shared machine slows all alike; prints steps/s per run and the median ratio against the first
thread count.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from bench_speed import bare_loop_code
    from core.config import TrainConfig
    settings = dict(kv.split("=", 1) for kv in args.set)
    cfg = TrainConfig(**{k: type(getattr(TrainConfig(), k) if getattr(TrainConfig(), k) is not None else 0.0)(v)
                         for k, v in settings.items()}).to_dict()
    rates: dict[int, list[float]] = {n: [] for n in args.threads}
    for pair in range(args.pairs):
        for n in args.threads:
            prelude = f"from core import models; models.PRESET_WIDTH['fast'] = {args.width}\n" if args.width else ""
            code = bare_loop_code(n, prelude)
            out = subprocess.run([sys.executable, "-c", code, json.dumps(cfg), str(args.steps), str(args.warmup)],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
            sps = json.loads(out.strip().splitlines()[-1][6:])["steps_per_second"]
            rates[n].append(sps)
            print(f"pair {pair}: {n} thread(s): {sps:.2f} steps/s", flush=True)
    base = args.threads[0]
    for n in args.threads:
        ratios = [a / b for a, b in zip(rates[n], rates[base])]
        print(f"{n} thread(s): median {statistics.median(rates[n]):.2f} steps/s, "
              f"median ratio vs {base}: {statistics.median(ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
