"""The app as a user meets it: its start, seconds from pressing Start to the first loss point, and memory.

    python bench/bench_ui.py            # 3 runs, medians
    python bench/bench_ui.py --runs 1

Starts the real app (`python app.py`) as its own process (the seconds until its page answers, and the
CPU-seconds its UI process and its fork server spent by then), presses Start through the named API
(default settings, bundled MNIST, a short run), and polls /status every 50 ms until the first
event exists. Then reports the peak resident memory (VmHWM) of the UI process and of the
trainer process, and whether the UI process ever imported torch_xla.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.bench_viewers import cpu_seconds  # noqa: E402


def vm_hwm_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def one_run(client, steps: int) -> tuple[float, float | None]:
    """(seconds to the first loss point, trainer peak RSS MB sampled while it runs)."""
    from tests.apphelpers import press_start
    _, t0 = press_start(client, dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=64,
                                precision="fp32", device="auto", steps=steps)
    first = None
    trainer_peak = None
    while True:
        status = client.predict(api_name="/status")
        if first is None and status.get("events"):
            first = time.perf_counter() - t0
        if status.get("pid"):
            trainer_peak = max(trainer_peak or 0, vm_hwm_mb(status["pid"]) or 0) or trainer_peak
        if status.get("state") in ("done", "failed", "stopped"):
            return first, trainer_peak
        time.sleep(0.05)


def watch(client, seconds: float) -> None:
    """Poll /status once a second, as an open page does, for `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        client.predict(api_name="/status")
        time.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pause", type=float, default=15.0,
                        help="seconds between a run's end and the next Start (the app readies its next "
                             "trainer meanwhile; 0 measures an immediate restart)")
    args = parser.parse_args()
    from tests.apphelpers import RunningApp, children_of
    started = time.perf_counter()
    app = RunningApp(tempfile.mkdtemp(prefix="blink-bench-ui-")).wait_ready()
    ready = time.perf_counter() - started
    fork_server = max(children_of(app.process.pid), key=cpu_seconds)   # the one that imported torch
    print(f"app start: page answers {ready:.1f} s after `python app.py`; CPU by then: UI process "
          f"{cpu_seconds(app.process.pid):.2f} s, fork server {cpu_seconds(fork_server):.2f} s")
    try:
        client = app.client()
        firsts, trainer_peaks = [], []
        for i in range(args.runs):
            watch(client, args.pause)   # the page is open a while before anyone presses Start again
            first, peak = one_run(client, args.steps)
            firsts.append(first)
            trainer_peaks.append(peak)
            print(f"run {i + 1}: first loss point {first:.2f} s after Start; trainer peak RSS {peak:.0f} MB")
        ui_peak = vm_hwm_mb(app.process.pid)
        with open(f"/proc/{app.process.pid}/maps") as f:
            xla_loaded = "torch_xla" in f.read()
        print(f"first loss point after Start: median {statistics.median(firsts):.2f} s over {args.runs} runs, "
              f"{args.pause:.0f} s after the page opened or the last run ended (target <= 3 s)")
        print(f"trainer peak RSS: median {statistics.median(trainer_peaks):.0f} MB (target <= 1500 MB)")
        print(f"UI process peak RSS: {ui_peak:.0f} MB (target <= 1024 MB); torch_xla loaded in the UI: {xla_loaded}")
    finally:
        app.stop()


if __name__ == "__main__":
    main()
