"""Stop, then Pause a moment later, through the real app: how many runs end as a Stop asks.

    python bench/bench_stop_then_pause.py --tries 20

Starts `python app.py` once; each try starts a CPU run, waits until it trains, presses Stop through
Gradio's REST API and, the moment the Stop's request file exists, Pause. A try counts as kept when
the run ends "stopped" by request with its checkpoint at its last step; the others are listed with
how they ended (a Pause that replaced the Stop left the run paused until the Stop watchdog ended
it). Also counts the Pauses that landed while the Stop was still pending: the race was run.
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
sys.path.insert(0, ROOT)

from core.rundir import FINAL_STATES, RunDir  # noqa: E402
from tests.apphelpers import RunningApp, press_start, wait_for  # noqa: E402

FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=16, precision="fp32",
            device="cpu", steps=100000)
# A Stop heard takes a second or two; a try whose run has not ended by then lost its Stop.
END_SECONDS = 60


def one_try(app, client) -> dict:
    press_start(client, **FORM, log_every=5, checkpoint_every=5)
    running = wait_for(lambda: (s := app.status())["state"] == "running" and s["step"] >= 5 and s, 120,
                       interval=0.1, what="the run")
    run = RunDir(os.path.join(app.runs_root, running["run"]))
    stop = threading.Thread(target=app.call, args=("stop", ""))
    stop.start()
    wait_for(lambda: run.read_request() == "stop", 10, interval=0.002, what="the Stop")
    answer = app.call("pause", "")[0]
    stop.join()
    deadline = time.time() + END_SECONDS
    while (final := app.status())["state"] not in FINAL_STATES and time.time() < deadline:
        time.sleep(0.1)
    if final["state"] not in FINAL_STATES:   # the Pause won: end this run for the next try
        app.call("stop", "")
        wait_for(lambda: app.status()["state"] in FINAL_STATES, 120, what="the run to stop")
    kept = (final["state"] == "stopped" and final["message"] == f"Stopped by request at step {final['step']}."
            and final["saved_step"] == final["step"])
    return {"kept": kept, "raced": answer.startswith("Stopping already"), "state": final["state"],
            "message": final["message"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    runs = tempfile.mkdtemp(prefix="bench-stop-pause-")
    app = RunningApp(runs, env={"OMP_NUM_THREADS": "1"}).wait_ready()
    try:
        client = app.client()
        results = [one_try(app, client) for _ in range(args.tries)]
    finally:
        app.stop()
    print(json.dumps({"tries": args.tries, "kept": sum(r["kept"] for r in results),
                      "raced": sum(r["raced"] for r in results),
                      "not_kept": [r for r in results if not r["kept"]]}, indent=2))


if __name__ == "__main__":
    main()
