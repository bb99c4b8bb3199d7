"""What the page's Step and "10 steps" cost a paused run: seconds from the request to the status
saying it stepped, against the same run's own seconds per step while it trained.

    python bench/bench_step.py                      # the default CPU run, 5 trials of each
    python bench/bench_step.py --gan wgan-gp --trials 3
    CPU_NUM_DEVICES=4 python bench/bench_step.py --device xla-cpu --batch-size 64

Runs the real CLI trainer (`python -m core.train`), lets it train past its warm-up, pauses it with
the request the page's Pause writes, then writes the page's step requests (RunDir.request("step",
n)) and times each until the status says `stepped_from`. Each Step is real training: its updates
count toward the run's steps and are in the next checkpoint; what it adds is a grid and D's
verdicts before and after, and a loss point per update.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.rundir import RunDir  # noqa: E402
from tests.apphelpers import wait_for  # noqa: E402

WARM_STEPS = 101   # past the early quality point (step 50), which builds its meter once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="as on the page: cpu, cuda, tpu, xla-cpu")
    parser.add_argument("--gan", default="dcgan")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    run = RunDir(os.path.join(tempfile.mkdtemp(prefix="bench-step-"), "run"))
    process = subprocess.Popen([sys.executable, "-m", "core.train", "--device", args.device, "--gan", args.gan,
                                "--batch-size", str(args.batch_size), "--steps", "100000", "--run-dir", run.path],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: run.read_status().step >= WARM_STEPS, 600, interval=0.05, what="the warm-up steps")
        training = run.read_status()
        seconds_per_step = 1 / training.steps_per_second
        run.request("pause")
        wait_for(lambda: run.read_status().state == "paused", 120, interval=0.01, what="paused")
        results = {}
        for count in (1, 10):
            times = []
            for _ in range(args.trials):
                before = run.read_status().step
                t0 = time.perf_counter()
                run.request("step", count)
                wait_for(lambda: (s := run.read_status()).stepped_from == before and s.step == before + count,
                         120, interval=0.005, what=f"{count} steps")
                times.append(time.perf_counter() - t0)
            results[count] = times
        run.request("stop")
        for count, times in results.items():
            median = statistics.median(times)
            print(json.dumps({"device": args.device, "gan": args.gan, "batch": args.batch_size, "steps": count,
                              "median_seconds": round(median, 3), "seconds": [round(t, 3) for t in times],
                              "training_seconds_per_step": round(seconds_per_step, 4),
                              "overhead_seconds": round(median - count * seconds_per_step, 3)}), flush=True)
    finally:
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    main()
