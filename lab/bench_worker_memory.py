"""How much memory does each Sample-tab action take in the viewer-work process?

    python lab/bench_worker_memory.py

Starts the real app (`python app.py`, private runs folder, no run: the shipped generator), finds
its viewer-work process (the child at nice 19), and calls each action three times through
gradio_client while a thread samples the worker's RSS every 10 ms; prints the worker's RSS before,
its peak (anonymous and file-backed parts) and after, per action, and the UI process's RSS.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_viewers import rss_mb  # noqa: E402
from tests.apphelpers import RunningApp, children_of  # noqa: E402

ACTIONS = [
    ("sample", "/sample", {"seed": 1, "count": 256}),
    ("download_samples", "/download_samples", {"seed": 1, "count": 256}),
    ("interpolate", "/interpolate", {"seed_a": 1, "seed_b": 2, "steps": 32, "mode": "spherical"}),
    ("interpolation_gif", "/interpolation_gif", {"seed_a": 1, "seed_b": 2, "steps": 32, "mode": "linear"}),
    ("explore", "/explore", {"seed": 3, "psi": 0.7}),
    ("neighbours", "/neighbours", {"seed": 3, "psi": 0.7, "k": 16}),
    ("preview_dataset", "/preview_dataset", {"dataset": "bundled-mnist", "data_path": ""}),
]


def nice_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])


def rss_parts(pid: int) -> dict:
    parts = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("RssAnon", "RssFile")):
            parts[line.split(":")[0]] = int(line.split()[1]) // 1024
    return parts


def main() -> None:
    app = RunningApp(tempfile.mkdtemp(prefix="bench-worker-memory-")).wait_ready()
    try:
        deadline = time.time() + 60
        workers = []
        while not workers and time.time() < deadline:
            workers = [p for p in children_of(app.process.pid) if nice_of(p) == 19]
            time.sleep(0.5)
        (worker,) = workers
        peak, parts, stop = [0.0], {}, threading.Event()

        def sample() -> None:
            while not stop.is_set():
                rss = rss_mb(worker)
                if rss > peak[0]:
                    peak[0] = rss
                    parts.update(rss_parts(worker))
                time.sleep(0.01)

        threading.Thread(target=sample, daemon=True).start()
        client = app.client()
        print(f"UI process RSS {rss_mb(app.process.pid):.0f} MB; worker idle {rss_mb(worker):.0f} MB")
        print("| action (x3) | worker RSS MB before | peak (anon / file) | after |")
        print("|---|---|---|---|")
        for name, endpoint, arguments in ACTIONS:
            before = peak[0] = rss_mb(worker)
            for _ in range(3):
                client.predict(**arguments, api_name=endpoint)
            time.sleep(0.3)
            print(f"| {name} | {before:.0f} | {peak[0]:.0f} ({parts.get('RssAnon')} / {parts.get('RssFile')}) | "
                  f"{rss_mb(worker):.0f} |", flush=True)
        stop.set()
    finally:
        app.stop()


if __name__ == "__main__":
    main()
