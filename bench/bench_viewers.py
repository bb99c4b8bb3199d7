"""How many viewers polling once a second can one machine serve while it trains?

Starts the real app (`python app.py`, private runs folder), starts one tiny CPU training run,
then measures the trainer's steps/s in windows with 0, 5, 10, 20 and 40 viewers polling, and
0 again at the end (drift on a shared machine). Each viewer is a gradio_client Client (its own
session, so /poll returns skips when nothing changed, as a browser tab would) that calls
/poll and /status once per second, the UI's Timer rate. The viewers run on the same machine,
so this is a pessimistic bound: real viewers' browsers run elsewhere.

    python bench/bench_viewers.py            # short: 40 s windows
    python bench/bench_viewers.py --window 120 --counts 0 5 10 20 40 80
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_step(run_path: str) -> int:
    try:
        with open(os.path.join(run_path, "status.json")) as f:
            return int(json.load(f).get("step") or 0)
    except (OSError, ValueError):
        return 0


def viewers(url: str, count: int, stop: threading.Event, stats: dict) -> list[threading.Thread]:
    from gradio_client import Client

    def viewer(i: int) -> None:
        try:
            client = Client(url, verbose=False)
        except Exception as exc:
            stats["errors"].append(repr(exc))
            return
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                client.predict(api_name="/poll" if i % 2 == 0 else "/status")
                stats["latency"].append(time.perf_counter() - t0)
            except Exception as exc:
                stats["errors"].append(repr(exc))
            stop.wait(max(0.0, 1.0 - (time.perf_counter() - t0)))    # one poll per second, like the Timer
    threads = [threading.Thread(target=viewer, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads


def measure(run_path: str, url: str, count: int, window: float) -> dict:
    stop, stats = threading.Event(), {"latency": [], "errors": []}
    threads = viewers(url, count, stop, stats)
    time.sleep(min(10.0, window / 4))          # let the clients connect before the window opens
    s0, t0 = read_step(run_path), time.perf_counter()
    time.sleep(window)
    s1, t1 = read_step(run_path), time.perf_counter()
    stop.set()
    for t in threads:
        t.join(30)
    lat = sorted(stats["latency"])
    return {"viewers": count, "steps_per_s": (s1 - s0) / (t1 - t0), "polls": len(lat),
            "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "p95_ms": 1000 * lat[int(len(lat) * 0.95)] if lat else None, "errors": len(stats["errors"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=40.0, help="seconds measured per viewer count")
    parser.add_argument("--counts", type=int, nargs="+", default=[0, 5, 10, 20, 40])
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    sys.path.insert(0, ROOT)
    from tests.apphelpers import RunningApp, wait_for
    root = tempfile.mkdtemp(prefix="blink-bench-")
    app = RunningApp(root, env={"OMP_NUM_THREADS": "1"}).wait_ready()
    try:
        client = app.client()
        client.predict(dataset="bundled-mnist", gan="dcgan", preset="fast", batch_size=args.batch_size,
                       precision="fp32", device="cpu", steps=1_000_000, log_every=1, grid_every=10,
                       checkpoint_every=1_000_000, api_name="/start")
        status = wait_for(lambda: (lambda s: s if s.get("state") == "running" and s.get("step", 0) >= 3 else None)(
            client.predict(api_name="/status")), 300, 1.0, "the run to start")
        run_path = os.path.join(root, status["run"])
        results = [measure(run_path, app.url, n, args.window) for n in [*args.counts, 0]]
    finally:
        app.stop()
    base = results[0]["steps_per_s"] or float("nan")
    drift = results[-1]["steps_per_s"] / base if base else float("nan")
    print(f"\nwindow {args.window:.0f} s per row, batch {args.batch_size}, CPU; viewers poll /poll or /status at 1 Hz")
    print(f"{'viewers':>7} {'steps/s':>8} {'ratio':>6} {'polls':>6} {'p50 ms':>7} {'p95 ms':>7} {'errors':>6}")
    for r in results:
        print(f"{r['viewers']:>7} {r['steps_per_s']:>8.3f} {r['steps_per_s'] / base:>6.2f} {r['polls']:>6} "
              f"{r['p50_ms'] or 0:>7.0f} {r['p95_ms'] or 0:>7.0f} {r['errors']:>6}")
    served = [r["viewers"] for r in results[:-1] if r["steps_per_s"] >= 0.9 * base and not r["errors"]]
    print(f"baseline drift (0 viewers, last vs first): {drift:.2f}")
    print(f"most viewers with training slowed < 10%: {max(served) if served else 0}")
    return 0


if __name__ == "__main__":   # spawns the app: never at import
    sys.exit(main())
