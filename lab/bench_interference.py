"""How much does a small, bursty share of a core cost the trainer on two cores?

    python lab/bench_interference.py                      # 3 rounds, 250 steps each
    python lab/bench_interference.py --burst-ms 3 --period-ms 30 --rounds 3

Runs bench/bare_loop.py (2 torch threads) alone and beside a process that burns
--burst-ms of CPU every --period-ms (what a server answering a room in bursts looks like to the
trainer), each with libgomp's default wait policy and with OMP_WAIT_POLICY=PASSIVE, interleaved
so a drifting host slows all alike; prints steps/s per run and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

def burn(burst: float, period: float) -> None:
    """Busy-wait `burst` seconds every `period` seconds, forever (run as `--burn BURST PERIOD`)."""
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < burst:
            pass
        time.sleep(period)


def bare_steps_per_second(steps: int, policy: str, bursts: tuple[float, float] | None) -> float:
    env = {**os.environ, **({"OMP_WAIT_POLICY": policy} if policy else {})}
    burner = (subprocess.Popen([sys.executable, os.path.abspath(__file__), "--burn", *map(str, bursts)])
              if bursts else None)
    try:
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bare_loop.py"), "--threads", "2",
                              "--steps", str(steps), "--warmup", "20"], cwd=ROOT, capture_output=True, text=True,
                             check=True, env=env).stdout
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    return json.loads(out.strip().splitlines()[-1][6:])["steps_per_second"]


def main() -> None:
    if sys.argv[1:2] == ["--burn"]:
        burn(float(sys.argv[2]), float(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst-ms", type=float, default=3.0)
    parser.add_argument("--period-ms", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loads = {"alone": None, f"bursts {args.burst_ms:g}/{args.period_ms:g} ms": (args.burst_ms / 1000, args.period_ms / 1000)}
    rates: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for load, bursts in loads.items():
            for policy in ("", "PASSIVE"):
                rate = bare_steps_per_second(args.steps, policy, bursts)
                rates.setdefault((load, policy or "default"), []).append(rate)
                print(f"round {round_}: {load}, wait policy {policy or 'default'}: {rate:.2f} steps/s", flush=True)
    for (load, policy), values in rates.items():
        print(f"{load}, {policy}: median {statistics.median(values):.2f} steps/s", flush=True)


if __name__ == "__main__":
    main()
