"""The torchrun road's cost on this CPU: one process with 2 threads against 2 processes with 1 thread
each (DDP over gloo), the same run at the same global batch.

    python bench/bench_ddp.py                          # batch 128, 300 steps, 1 trial of each road
    python bench/bench_ddp.py --batch 64 --steps 200 --trials 3

Each road is the real CLI trainer as a user starts it: `python -m core.train` (OMP_NUM_THREADS=2)
and `python -m torch.distributed.run --standalone --nproc-per-node 2 -m core.train`
(OMP_NUM_THREADS=1), defaults but the batch and the steps, no quality meter (rank 0 alone would
measure it, the others waiting: a cost of its own). Each road's steps/s and images/s are its final
status's, the trainer's own steady speed (from step 2, paused time left out); their ratio is the
road's overhead here: the collectives (gradients, BatchNorm's statistics, the decisions) and
rank 0's bookkeeping that the other rank waits for. On two cores two processes cannot be faster
than one process's two threads; on N GPUs the question is another (bench/README.md says what
a device check would add).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from core.rundir import RunDir  # noqa: E402

ROADS = {
    "1 process x 2 threads": (["-m", "core.train"], "2"),
    "2 processes x 1 thread (torchrun, DDP, gloo)": (
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "core.train"], "1"),
}


def one_run(launch: list[str], threads: str, batch: int, steps: int, timeout: float) -> dict:
    run = RunDir(os.path.join(tempfile.mkdtemp(prefix="bench-ddp-"), "run"))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, *launch, "--device", "cpu", "--batch-size", str(batch),
                           "--steps", str(steps), "--quality-every", "0", "--run-dir", run.path],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    status = run.read_status()
    if proc.returncode != 0 or status.state != "done":
        raise SystemExit(f"the run did not finish ({status.state}: {status.message}):\n{proc.stdout[-2000:]}"
                         f"\n{proc.stderr[-2000:]}")
    return {"steps_per_second": status.steps_per_second, "images_per_second": status.images_per_second,
            "layout": status.layout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128, help="the global batch, split over the processes")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one run")
    args = parser.parse_args()
    medians = {}
    for road, (launch, threads) in ROADS.items():
        runs = [one_run(launch, threads, args.batch, args.steps, args.timeout) for _ in range(args.trials)]
        medians[road] = {key: statistics.median(run[key] for run in runs)
                         for key in ("steps_per_second", "images_per_second")}
        print(json.dumps({"road": road, "layout": runs[0]["layout"], "batch": args.batch, "steps": args.steps,
                          **medians[road], "trials": [r["steps_per_second"] for r in runs]}), flush=True)
    one, two = medians.values()
    print(json.dumps({"two_processes_over_one": round(two["steps_per_second"] / one["steps_per_second"], 3)}))


if __name__ == "__main__":
    main()
