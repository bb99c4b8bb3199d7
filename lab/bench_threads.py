"""Does the default CPU model train faster on 1 torch thread or on all of them?

    python lab/bench_threads.py                 # defaults, 3 interleaved pairs of 200 steps
    python lab/bench_threads.py --threads 1 2 --steps 200 --pairs 3 --set batch_size=128 --width 48

Runs bench/bare_loop.py (the trainer's own setup and step, nothing around them) in fresh processes with torch.set_num_threads(N), the thread counts interleaved so
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
    rates: dict[int, list[float]] = {n: [] for n in args.threads}
    for pair in range(args.pairs):
        for n in args.threads:
            flags = [f"--set={kv}" for kv in args.set] + ([f"--width={args.width}"] if args.width else [])
            out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bare_loop.py"), "--threads", str(n),
                                  "--steps", str(args.steps), "--warmup", str(args.warmup), *flags],
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
