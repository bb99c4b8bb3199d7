"""Runs side by side: an earlier run every page shows beside the live one, and the comparison starts
(the live run again with one setting changed): at once beside it where the device takes two runs
(app/job.py start_beside), else once it finishes. The live feed (app/live.py) sends what every page
shows of it; the page's Compare runs (app/ui.py) picks it or starts a comparison.

    comparison = Comparison(job)
    comparison.show(name)                               # "" for the live run alone
    comparison.start(plan, beside, change, at_once)   # now, beside it, or once the live run finishes
    comparison.run, comparison.note                     # what every page shows
"""
from __future__ import annotations

import os
import threading
import time

from core.plan import Plan
from core import devices
from core.rundir import FINAL_STATES, RunDir, list_runs
from core.status import Status

WAIT_SECONDS = 0.5   # how often a queued comparison looks whether the live run has ended


class ComparisonRefused(ValueError):
    """A pick or a start the comparison cannot take; the message says why."""


def at_once_problem(live: Status, cores: int) -> str:
    """Why a comparison cannot train at once beside the live run (its status) here; "" where it can:
    a CUDA GPU (two processes share it), or a CPU of at least two cores (each run takes half)."""
    if live.chunk:
        return "on ZeroGPU each run trains in GPU calls of its own"
    if devices.is_xla(live.device_kind):
        return "one process holds the XLA devices (a TPU's chips)"
    if live.processes > 1:
        return "the live run trains in several processes"
    if devices.is_cpu(live.device_kind) and cores < 2:
        return "the CPU has one core"
    return ""


class Comparison:
    def __init__(self, job):
        self.job = job
        self.run: RunDir | None = None   # the run beside the live one
        self.note = ""                   # a comparison waiting, or why one did not start
        self._queued: tuple[Plan, RunDir, str] | None = None
        self._lock = threading.Lock()

    def forget(self) -> None:
        """A new run that is no comparison: shown alone, and nothing waits to start after it."""
        with self._lock:
            self.run, self.note, self._queued = None, "", None

    def runs(self) -> list[RunDir]:
        """The earlier runs of the live run's images (its dataset and folder), newest first."""
        current = self.job.run
        if current is None:
            return []
        try:
            mine = current.read_config()
        except (OSError, ValueError):
            return []
        same = []
        for run in list_runs(self.job.runs_root):
            try:
                config = run.read_config()
            except (OSError, ValueError):
                continue
            if run.path != current.path and (config.dataset, config.data_path) == (mine.dataset, mine.data_path):
                same.append(run)
        return same

    def show(self, name: str) -> str:
        """Show run `name` beside the live run on every page ("" shows the live run alone)."""
        run = next((run for run in self.runs() if run.name == name), None) if name else None
        if name and run is None:
            raise ComparisonRefused(f"No earlier run '{name}' of this run's images to compare with; pick one of the list.")
        with self._lock:
            self.run, self.note = run, ""
        return f"Run `{run.name}` is beside the live run on every page." if run else "The live run alone again."

    def start(self, plan: Plan, beside: RunDir, change: str, at_once: bool = True) -> str:
        """Start `plan` (run `beside` with one setting changed, planned by the caller) shown beside
        `beside`: now if nothing trains; while the live run trains, beside it at once where the
        device takes two runs (at_once_problem), else when it finishes. The job's refusals
        (JobBusy, DiskRefused) come through."""
        with self._lock:
            if self._queued is not None:
                raise ComparisonRefused(f"A comparison is already waiting for run {self._queued[1].name} to finish.")
            training = self.job.is_active()
            problem = ""
            if training and at_once:
                problem = at_once_problem(beside.read_status(), len(os.sched_getaffinity(0))) or (
                    "" if self.job.trains_here() else "its trainer was started by another app, which supervises it")
            if training and (problem or not at_once):
                self._queued = (plan, beside, change)
                self.note = f"Next: run {beside.name} again with {change}, when it finishes."
                threading.Thread(target=self._start_when_done, name="blink-comparison", daemon=True).start()
                why = f" (not at once: {problem})" if problem else ""
                return f"Queued: run `{beside.name}` again with {change} starts when it finishes{why}."
        # Outside this lock: the job takes its own, under which it calls forget().
        run = self.job.start_beside(plan) if training else self.job.start(plan)
        with self._lock:
            self.run, self.note = beside, ""
        if training:
            return f"Started run `{run.name}`: {change}, at once beside run `{beside.name}`, which trains on."
        return f"Started run `{run.name}`: {change}, beside run `{beside.name}`."

    def _start_when_done(self) -> None:
        """The queued comparison's start, once the run it follows ends: only if that run finished
        (a Stop means the lesson went another way), and said on every page if it does not start."""
        while True:
            time.sleep(WAIT_SECONDS)
            with self._lock:
                if self._queued is None or self.job.closing:
                    self._queued = None
                    return
                plan, beside, change = self._queued
                if (self.job.is_active() and beside.read_status().state not in FINAL_STATES) \
                        or self.job.beside_training() is not None:   # two at once: both must end
                    continue
                self._queued = None
            state = beside.read_status().state
            if state != "done":
                self.note = f"The comparison did not start: run {beside.name} ended {state}, not finished."
                return
            try:
                self.job.start(plan)
            except Exception as exc:   # busy, a full disk: whatever it is, every page is told
                self.note = f"The comparison did not start: {exc}"
                return
            with self._lock:
                self.run, self.note = beside, ""
            return
