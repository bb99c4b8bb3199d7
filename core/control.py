"""Whether the training loop goes on: "run", "pause", "stop", or "gone" (the app that started it
has closed). The trainer is one process whatever the device count (SPMD), so this is its own
decision, read from the run directory's request file that the page and the CLI write; as
stylegan2-ada's `abort_fn`, it is passed into the loop, so a test or a bench can hand in its own.

    control = Control(run, watch_pids)
    control.request_waiting()       # between log steps: make this step a log step?
    control.decision()              # "run" | "pause" | "stop" | "gone" | "step" (while paused)
    control.wait_while_paused()     # the decision once the pause ends (or a step is asked for)
"""
from __future__ import annotations

import os
import time

from core.rundir import pid_alive

# The loop looks for a Stop/Pause request between log steps this often, so a button is heard
# within about a second whatever the step time (bench/README.md, "Stop and Pause").
CONTROL_CHECK_SECONDS = 0.5
PAUSE_POLL_SECONDS = 0.2


class Control:
    def __init__(self, run, watch_pids=()):
        """run: the RunDir whose request file the UI and the CLI write; watch_pids: processes
        whose end stops the run (the app that started it)."""
        self.run = run
        self.watch_pids = [p for p in (watch_pids or ()) if p and p != os.getpid()]
        self._last_check = 0.0

    def decision(self) -> str:
        """The app gone first, then a stop (RunDir.request keeps it whatever is pressed after it), a pause."""
        if any(not pid_alive(p) for p in self.watch_pids):
            return "gone"
        return {"stop": "stop", "pause": "pause", "step": "step"}.get(self.run.read_request(), "run")

    def request_waiting(self) -> bool:
        """Between log steps, at most every CONTROL_CHECK_SECONDS: is there something to act on?"""
        now = time.perf_counter()
        if now - self._last_check < CONTROL_CHECK_SECONDS:
            return False
        self._last_check = now
        return self.decision() != "run"

    def wait_while_paused(self) -> str:
        """Wait until the pause request is gone; then the decision ("run" once resumed: the
        Resume is cleared; "step": train the asked updates, still paused)."""
        while (decision := self.decision()) == "pause":
            time.sleep(PAUSE_POLL_SECONDS)
        if decision == "run":
            self.run.clear_request("resume")   # only the Resume: a Stop pressed since must still be heard
        return decision
