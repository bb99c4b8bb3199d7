"""The UI process's memory as page sessions come and go: `python app.py` started as a user would,
then N gradio_client sessions (10 at a time, in this process), each asking /status, a sample and
the dataset preview, as a page load does; the app's resident memory (VmRSS, from /proc) at start,
after every 100 sessions and after 10 s idle. Gradio keeps each session's state until
BLINK_SESSIONS sessions exist, so the memory should rise, then stay flat.

    python bench/bench_ui_memory.py --sessions 500 [--sessions-kept 300]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.apphelpers import RunningApp  # noqa: E402


def resident_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def one_session(url: str, seed: int, errors: list) -> None:
    from gradio_client import Client
    try:
        client = Client(url, verbose=False)
        client.predict(api_name="/status")
        client.predict(seed, 16, "seed", api_name="/sample")
        client.predict("bundled-mnist", "", api_name="/preview_dataset")
    except Exception as exc:   # counted, not fatal: the figure is the memory
        errors.append(repr(exc)[:200])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--sessions-kept", type=int, default=None, help="BLINK_SESSIONS for the app (default: its own)")
    args = parser.parse_args()
    env = {"OMP_NUM_THREADS": "1"}
    if args.sessions_kept is not None:
        env["BLINK_SESSIONS"] = str(args.sessions_kept)
    runs = tempfile.mkdtemp(prefix="bench-ui-memory-")
    app = RunningApp(runs, env=env).wait_ready()
    errors: list[str] = []
    try:
        time.sleep(3)
        print(f"start: {resident_mb(app.process.pid)} MB", flush=True)
        for done in range(0, args.sessions, 10):
            threads = [threading.Thread(target=one_session, args=(app.url, done + i, errors)) for i in range(10)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            if (done + 10) % 100 == 0:
                print(f"after {done + 10} sessions: {resident_mb(app.process.pid)} MB", flush=True)
        time.sleep(10)
        print(f"10 s idle: {resident_mb(app.process.pid)} MB; {len(errors)} failed requests", flush=True)
        for error in sorted(set(errors))[:3]:
            print("  e.g.", error)
    finally:
        app.stop()


if __name__ == "__main__":
    main()
