"""Two runs at once (a comparison started "at once", app/compare.py): on a CPU each with all the
CPU's threads, as two trainers would be left alone, against each with half of them, as the app asks
through the run directory (RunDir.share_cpu); on a CUDA GPU the two share the GPU as the app leaves
them. One run alone as the yardstick.

    python bench/bench_at_once.py                  # the CPU, batch 128, 300 steps
    python bench/bench_at_once.py --steps 400 --batch 64
    python bench/bench_at_once.py --device cuda --steps 1000

Each run is the real CLI trainer as a user starts it (`python -m core.train`, defaults but the batch
and the steps, no quality meter); its steps/s is its final status's, the trainer's own steady speed.
The two of a pair start together and run the same config; a share is written into each run
directory before its trainer starts, as the job writes it. "together" is the two
runs' steps/s added up: against the run alone, what two at once cost or save in all.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.rundir import RunDir  # noqa: E402


def runs(count: int, device: str, batch: int, steps: int, share: int | None, timeout: float) -> list[float]:
    """`count` CLI trainers started together; each one's steps/s. share: the CPU threads asked of
    each (None: each keeps all of them)."""
    folder = tempfile.mkdtemp(prefix="bench-at-once-")
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("OMP_NUM_THREADS", None)
    started = []
    for index in range(count):
        run = RunDir(os.path.join(folder, f"run{index}"))
        if share is not None:   # before the trainer starts, as the job asks it
            os.makedirs(run.path)
            run.share_cpu(share)
        process = subprocess.Popen([sys.executable, "-m", "core.train", "--device", device, "--batch-size",
                                    str(batch), "--steps", str(steps), "--quality-every", "0",
                                    "--run-dir", run.path], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append((run, process))
    speeds = []
    for run, process in started:
        _, errors = process.communicate(timeout=timeout)
        status = run.read_status()
        if process.returncode != 0 or status.state != "done":
            raise SystemExit(f"a run did not finish ({status.state}: {status.message}):\n{errors[-2000:]}")
        speeds.append(status.steps_per_second)
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one run")
    args = parser.parse_args()
    half = max(1, len(os.sched_getaffinity(0)) // 2)
    results = {}
    roads = [("one run alone, every thread", 1, None), ("two at once, every thread each", 2, None)]
    if args.device == "cpu":   # on a GPU the app asks no share of the CPU
        roads.append((f"two at once, {half} thread(s) each (the app's share)", 2, half))
    for name, count, share in roads:
        speeds = runs(count, args.device, args.batch, args.steps, share, args.timeout)
        results[name] = {"steps_per_second": speeds, "together": round(sum(speeds), 2)}
        print(f"{name}: steps/s {', '.join(f'{s:.2f}' for s in speeds)}; together {sum(speeds):.2f}", flush=True)
    print("BENCH " + json.dumps({"device": args.device, "batch": args.batch, "steps": args.steps, "cores": len(os.sched_getaffinity(0)),
                                 "results": results}))


if __name__ == "__main__":
    main()
