"""The ZeroGPU road, timed against the stand-in of ZeroGPU's device API (tests/zerogpu/).

The app runs as a Space runs it (the real `spaces` package in its ZeroGPU mode, its worker forked
and kept between calls; tests/zerogpu/space.py sets aside only the worker's CUDA step), trains a
run on the bundled MNIST in chunks, and a room of viewers presses Sample together. Measured:
    - Start -> the first chunk training (the first loss point): data preparation, the first call's
      schedule, fork and setup;
    - each chunk's share of its GPU call spent training (training seconds / allow-to-release);
    - N Sample presses sent at once through Gradio's API: seconds to each answer (p50, p95), refusals.

    python bench/bench_zerogpu.py --chunk-seconds 10 --chunks 4 --viewers 50
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.apphelpers import RunningApp, wait_for   # noqa: E402
from tests.zerogpu.device_api import DeviceApi       # noqa: E402


def samples_at_once(app, viewers: int) -> dict:
    clients = [app.client() for _ in range(viewers)]   # a viewer each, connected before the burst
    sent = time.perf_counter()
    jobs = [client.submit(seed, 16, "seed", api_name="/sample") for seed, client in enumerate(clients)]
    seconds, refused = [], 0
    for job in jobs:
        try:
            job.result(timeout=300)
            seconds.append(time.perf_counter() - sent)
        except Exception:   # Gradio's "queue is full" and any other refusal count alike
            refused += 1
    seconds.sort()
    p95 = seconds[max(int(0.95 * len(seconds)) - 1, 0)] if seconds else None
    return {"answered": len(seconds), "refused": refused,
            "p50": round(statistics.median(seconds), 2) if seconds else None, "p95": round(p95, 2) if p95 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk-seconds", type=float, default=10.0)
    parser.add_argument("--chunks", type=int, default=4, help="chunks to time before Stop")
    parser.add_argument("--viewers", type=int, default=50)
    args = parser.parse_args()
    api = DeviceApi().start()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": api.url,
               "BLINK_CHUNK_SECONDS": str(args.chunk_seconds), "BLINK_DATA_DIR": os.path.join(tmp, "cache")}
        app = RunningApp(tmp, env=env, script=os.path.join(ROOT, "tests", "zerogpu", "space.py")).wait_ready()
        try:
            report = {"sample": samples_at_once(app, args.viewers)}
            client = app.client()
            statuses = []
            started = time.perf_counter()
            client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=64,
                           precision="fp32", device="auto", steps=100000, api_name="/start")

            def status():
                statuses.append((time.perf_counter() - started, client.predict(api_name="/status")))
                return statuses[-1][1]
            wait_for(lambda: status()["step"] > 0, timeout=300, interval=0.05, what="the first step")
            report["start_to_training_s"] = round(statuses[-1][0], 2)
            wait_for(lambda: status()["chunk_ended"] >= args.chunks, timeout=60 * args.chunks + 120,
                     interval=0.2, what=f"{args.chunks} chunks")
            client.predict(api_name="/stop")
            wait_for(lambda: status()["state"] == "stopped", timeout=120, what="the stop")
            elapsed = {}   # training seconds of the run when each chunk ended
            for _, s in statuses:
                elapsed.setdefault(s["chunk_ended"], s["elapsed"])
            calls = [c for c in api.log() if c["allowed"] and c["released"]]
            shares = []
            for number, call in enumerate(calls, start=1):
                if number in elapsed and number - 1 in elapsed:
                    shares.append(round((elapsed[number] - elapsed[number - 1]) / (call["released"] - call["allowed"]), 3))
            report.update(chunk_training_share=shares, durations_asked=[c["duration"] for c in api.log()],
                          chunk_seconds=args.chunk_seconds)
        finally:
            app.stop()
            api.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
