"""The real trainer on CPU_NUM_DEVICES XLA:CPU devices (SPMD), driven by pause / stop through its
run directory, as the page does: pauses at step 4, checks the step count holds, then stops.

    CPU_NUM_DEVICES=4 python pause_stop.py OUT.json RUN_DIR
"""
import os
import sys
import threading
import time

from _common import tiny_config, write_result


def main(out, run_path):
    from core.rundir import RunDir
    from core.train import train

    config = tiny_config(steps=400, log_every=2, grid_every=1000)
    os.makedirs(os.path.join(run_path, "grids"), exist_ok=True)
    run = RunDir(run_path)
    run.write_config(config)
    seen = {"paused_at": None, "paused_status_step": None}

    def control():
        deadline = time.time() + 240
        while time.time() < deadline and run.read_status().step < 4:
            time.sleep(0.05)
        run.request("pause")
        while time.time() < deadline and run.read_status().state != "paused":
            time.sleep(0.05)
        seen["paused_status_step"] = run.read_status().step
        time.sleep(1.0)                      # paused: the step count must not move
        seen["paused_at"] = run.read_status().step
        run.request("stop")

    thread = threading.Thread(target=control, daemon=True)
    thread.start()
    state = train(config, run_path)
    thread.join(timeout=5)
    events, _ = run.read_events()
    write_result(out, {"state": state, "status": run.read_status().to_dict(), "seen": seen, "events": events})


if __name__ == "__main__":
    main(*sys.argv[1:])
