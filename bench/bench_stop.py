"""Seconds from pressing Stop (or Pause) to the trainer acting on it, by batch size.

    python bench/bench_stop.py                       # batch 128 and 512, 3 trials each, medians
    python bench/bench_stop.py --batches 512 --trials 1
    CPU_NUM_DEVICES=4 python bench/bench_stop.py --device xla-cpu --batches 64   # 4 XLA:CPU devices, SPMD

Runs the real CLI trainer (`python -m core.train`, --device, default model, bundled MNIST) with the
default log interval, waits until it is well into training, then writes the same stop request
the page's Stop button writes (RunDir.request) and times how long until the status says
`stopped`. The step it stopped at shows whether it was heard between log steps (a stop heard
only at log steps lands on a multiple of --log-every). Pause is timed the same way, to `paused`.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.rundir import RunDir  # noqa: E402
from tests.apphelpers import wait_for  # noqa: E402


def one_trial(device: str, batch: int, action: str, log_every: int, warm_steps: int) -> tuple[float, int]:
    run = RunDir(os.path.join(tempfile.mkdtemp(prefix="bench-stop-"), "run"))
    process = subprocess.Popen([sys.executable, "-m", "core.train", "--device", device, "--batch-size", str(batch),
                                "--steps", "100000", "--log-every", str(log_every), "--run-dir", run.path],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Well into training: past the first log step, so the step time is the steady one.
        wait_for(lambda: run.read_status().step >= warm_steps, 300, interval=0.05, what="the warm-up steps")
        time.sleep(random.uniform(0, 2))   # the request lands at an arbitrary point between log steps
        t0 = time.perf_counter()
        run.request(action)
        state = "stopped" if action == "stop" else "paused"
        status = wait_for(lambda: (s := run.read_status()).state == state and s, 300, interval=0.01, what=state)
        seconds = time.perf_counter() - t0
        if action == "pause":
            run.request("stop")
        return seconds, status.step
    finally:
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--device", default="cpu", help="as on the page: cpu, cuda, tpu, xla-cpu")
    args = parser.parse_args()
    for batch in args.batches:
        for action in ("stop", "pause"):
            # Past step 100: the early quality point (step 50) builds its meter, a one-off pause.
            results = [one_trial(args.device, batch, action, args.log_every, warm_steps=101)
                       for _ in range(args.trials)]
            seconds = [r[0] for r in results]
            print(json.dumps({"batch": batch, "action": action, "median_seconds": round(statistics.median(seconds), 2),
                              "seconds": [round(s, 2) for s in seconds], "steps": [r[1] for r in results],
                              "log_every": args.log_every, "device": args.device}), flush=True)


if __name__ == "__main__":
    main()
