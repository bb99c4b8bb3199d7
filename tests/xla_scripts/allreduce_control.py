"""The real trainer on one XLA:CPU device with XLA_ALWAYS_ALLREDUCE=1, driven by pause / stop.

With that variable the multi-core code paths run for real on one device, in torch_xla.launch's
worker process: loss means and the control flags (stop / pause agreed across replicas) go
through xm.all_reduce in the log step's graph, and the pause loop agrees through
Runtime.agree. A controller thread asks for a pause once a few steps are logged, waits for
status 'paused', then asks for a stop. (Several CPU devices under launch would hang in these
collectives.)

    XLA_ALWAYS_ALLREDUCE=1 python allreduce_control.py OUT.json RUN_DIR
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
    write_result(out, {"state": state, "status": run.read_status().to_dict(), "seen": seen, "events": events,
                       "always_allreduce": os.environ.get("XLA_ALWAYS_ALLREDUCE")})


if __name__ == "__main__":
    main(*sys.argv[1:])
