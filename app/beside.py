"""A run that trains on beside the live one: a comparison started at once (app/compare.py).

The job (app/job.py) keeps one live run, the one its controls and pages follow. Started at once, a
comparison becomes the live run and the run it repeats trains on here: its trainer is handed from
the job's supervisor to this one's, presses reach it too, and on a CPU each of the two is asked
through its run directory for half the threads (RunDir.share_cpu), the one left for all of them
once the other ends.

    beside = BesideRun(lock, on_end=job_ended)
    beside.take_over(live_trainer, earlier, new)   # before live_trainer starts `new`
    beside.training()                              # the run beside, while its trainer lives
    beside.ask(action, count, updates)             # a press on the live run, for it too
    beside.live_ended(run)                         # the job's word that the live trainer ended
"""
from __future__ import annotations

import os
import threading
import time

from app.supervisor import WATCH_SECONDS, TrainerSupervisor
from core import devices
from core.rundir import FINAL_STATES, RunDir


class BesideRun:
    def __init__(self, lock, on_end):
        """lock: the job's; on_end(run, TrainerEnd): the job's word on how a trainer ended."""
        self._on_end = on_end
        self.trainer = TrainerSupervisor(lock, on_end=self._ended)
        self._live: TrainerSupervisor | None = None   # the job's supervisor, of the live run's trainer

    def training(self) -> RunDir | None:
        """The run beside the live one while its trainer lives and has not written its end."""
        run = self.trainer.run if self.trainer.running() else None
        return run if run is not None and run.read_status().state not in FINAL_STATES else None

    def take_over(self, live: TrainerSupervisor, earlier: RunDir, new: RunDir) -> None:
        """From here on this supervises `live`'s trainer (of `earlier`), which is free to start `new`.
        Each trainer's end is reaped as it comes (not at a viewer's next look), so the one left takes
        every thread at once."""
        if devices.is_cpu(earlier.read_status().device_kind):
            half = max(1, len(os.sched_getaffinity(0)) // 2)
            for run in (earlier, new):   # written before `new` starts: its trainer reads it at its first step
                run.share_cpu(half)
        live.hand_over(self.trainer)
        self._live = live
        threading.Thread(target=self._reap_both, name="blink-beside", daemon=True).start()

    def _reap_both(self) -> None:
        while self.trainer.process is not None:
            time.sleep(WATCH_SECONDS)
            self._live.reap()
            self.trainer.reap()

    def ask(self, action: str, count: int, updates: str) -> None:
        """A press on the live run, for the run beside where it applies (a Step only to a paused run)."""
        run = self.training()
        if run is None or (action == "step" and run.read_status().state != "paused"):
            return
        try:
            run.request(action, count, updates)
        except OSError:   # a full disk: its trainer fails on its own next write, and says so
            return
        if action == "stop":
            self.trainer.watch_stop()

    def live_ended(self, run: RunDir) -> None:
        _give_back_the_cpu(run, self.training())

    def _ended(self, run: RunDir, end) -> None:
        self._on_end(run, end)
        live = self._live
        _give_back_the_cpu(run, live.run if live is not None and live.running() else None)


def _give_back_the_cpu(ended: RunDir, survivor: RunDir | None) -> None:
    """Of two runs at once, the one still training takes every CPU thread again; the one that ended
    keeps no share for a later session."""
    ended.clear_cpu_share()
    if survivor is None or survivor.read_cpu_share() is None:
        return
    try:
        survivor.share_cpu(0)
    except OSError:   # a full disk: it trains on at its share
        pass
