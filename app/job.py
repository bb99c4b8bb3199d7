"""The one training job of this server, shared by every viewer.

The job starts the trainer in a `spawn` process (the trainer owns the device; the UI process
never touches one), and reads the run directory for everyone who watches. Stop and pause are
written into the run directory, so they work no matter which process started the run.
A restarted UI adopts the newest run in the runs folder and shows it where it is.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from dataclasses import dataclass, field

from core.config import TrainConfig
from core.rundir import FINAL_STATES, RunDir, default_root, list_runs

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
SHIPPED_GENERATOR = os.path.join(ASSETS, "generator")
STOP_GRACE_SECONDS = 20.0


class JobBusy(RuntimeError):
    """A run is already going: one run at a time per server."""


def _train_child(config_dict: dict, run_path: str, resume: bool, parent_pid: int) -> None:
    """Entry point of the spawned trainer process (top level, so spawn can import it)."""
    from core.train import train
    train(TrainConfig.from_dict(config_dict), run_path, resume=resume, watch_parent=parent_pid)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) still answers kill(0); /proc says what it is.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class Snapshot:
    """What every viewer sees; rebuilt only when the run directory changed."""
    run_name: str = ""
    run_path: str = ""
    status: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    grid_path: str | None = None
    version: tuple = ()


class Job:
    def __init__(self, runs_root: str | None = None):
        self.runs_root = runs_root or default_root()
        self._lock = threading.Lock()
        self._process = None
        self._run: RunDir | None = None
        self._snapshot = Snapshot()
        self._events_offset = 0
        runs = list_runs(self.runs_root)
        if runs:   # a restarted UI shows the newest run where it is
            self._attach(runs[0])

    # ---- the current run -----------------------------------------------------------------
    @property
    def run(self) -> RunDir | None:
        return self._run

    def _attach(self, run: RunDir) -> None:
        self._run = run
        self._snapshot = Snapshot(run_name=run.name, run_path=run.path)
        self._events_offset = 0

    def is_active(self) -> bool:
        """True while a trainer is alive for the current run."""
        if self._process is not None and self._process.is_alive():
            return True
        if self._run is None:
            return False
        status = self._run.read_status()
        return status.get("state") not in FINAL_STATES and pid_alive(status.get("pid"))

    # ---- control ---------------------------------------------------------------------------
    def start(self, config: TrainConfig, resume_run: RunDir | None = None) -> RunDir:
        """Start a run (or resume one) in a background process; refuse if one is going."""
        with self._lock:
            if self.is_active():
                raise JobBusy(f"A run is already training ({self._run.name}). Watch it, or wait for it to end "
                              "(or press Stop) before starting another.")
            self._reap()
            run = resume_run or RunDir.create(config, self.runs_root)
            if resume_run is not None:
                run.clear_request()
                run.write_config(config)
                run.write_status("starting", "Resuming...")
            context = multiprocessing.get_context("spawn")   # fork + torch threads can deadlock
            process = context.Process(target=_train_child, name="blink-trainer", daemon=True,
                                      args=(config.to_dict(), run.path, resume_run is not None, os.getpid()))
            process.start()
            self._process = process
            self._attach(run)
            return run

    def request(self, action: str) -> str:
        """stop | pause | resume the current run; returns a message for the user."""
        run = self._run
        if run is None or not self.is_active():
            return "No run is training."
        run.request(action)
        return {"stop": "Stopping: the trainer saves a checkpoint first.", "pause": "Pausing...",
                "resume": "Resuming..."}[action]

    def shutdown(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop the trainer cleanly (checkpoint kept), escalating only if it does not answer."""
        process = self._process
        if process is None:
            return
        if process.is_alive() and self._run is not None:
            self._run.request("stop")
            process.join(grace)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        self._reap()

    def _reap(self) -> None:
        """Join a finished trainer; if it died without a final status, say so in the run."""
        process = self._process
        if process is None or process.is_alive():
            return
        process.join()
        self._process = None
        run = self._run
        if run is not None and run.read_status().get("state") not in FINAL_STATES:
            code = process.exitcode
            reason = ("it was killed (signal 9), most often for running out of memory: try a smaller batch size"
                      if code == -9 else f"it exited with code {code}")
            saved = run.read_status().get("saved_step") or 0
            kept = f" The last checkpoint (step {saved}) is kept." if saved else ""
            run.write_status("failed", f"The trainer process ended unexpectedly: {reason}.{kept}")

    # ---- what viewers see ------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current run's status, all events and newest grid; cheap when nothing changed."""
        with self._lock:
            self._reap()
            run = self._run
            if run is None:
                return self._snapshot
            status = run.read_status()
            if status.get("state") not in FINAL_STATES and status.get("pid") and not pid_alive(status["pid"]) \
                    and self._process is None and time.time() - status.get("updated", 0) > 5:
                run.write_status("failed", "The trainer process is gone (killed or crashed) without a final status.")
                status = run.read_status()
            new_events, self._events_offset = run.read_events(self._events_offset)
            grids = run.grids() if (new_events or not self._snapshot.grid_path
                                    or status.get("updated") != self._snapshot.status.get("updated")) else None
            snapshot = self._snapshot
            if new_events or status != snapshot.status or grids:
                grid_path = grids[-1][1] if grids else snapshot.grid_path
                self._snapshot = Snapshot(run.name, run.path, status, snapshot.events + new_events, grid_path,
                                          (run.name, status.get("updated"), self._events_offset, grid_path))
            return self._snapshot

    def generator_dir(self) -> str:
        """Where the Sample tab samples from: the current run once it has a generator, else the shipped one."""
        run = self._run
        if run is not None and run.has_generator():
            return run.path
        return SHIPPED_GENERATOR
