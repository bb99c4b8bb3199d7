"""Whether the training loop goes on: "run", "pause", "stop", or "gone" (the app that started it
has closed). The trainer is one process whatever the device count (SPMD), so this is its own
decision, read from the run directory's request file that the page and the CLI write; as
stylegan2-ada's `abort_fn`, it is passed into the loop, so a test or a bench can hand in its own.
Under torchrun (several processes, DDP) rank 0 decides for all: core/distributed.py SharedControl.

    control = Control(run, watch_pids)
    control.request_waiting()       # between log steps: make this step a log step?
    control.decision()              # "run" | "pause" | "stop" | "gone" | "step" (while paused)
    control.wait_while_paused()     # the decision once the pause ends (or a step is asked for)
    control.step_count()            # how many updates a Step asks for; paused_again() once done
    control.settings()              # the settings the host changed since the last call ({} if none)
    control.cpu_threads()           # the CPU threads asked for since the last call (None if none)
    control.ended()                 # the run ended: no request left for the next session
    control.between_chunks(paused)  # a chunked run's decision between two chunks (app/chain.py)

The words a run ends or pauses with (`stopped_message`, `paused_message`) are here too, so the
Loop and the chunk chain, which both act on these decisions, say the same thing.
"""
from __future__ import annotations

import os
import time

from core.rundir import pid_alive

# The loop looks for a Stop/Pause request between log steps this often, so a button is heard
# within about a second whatever the step time (bench/README.md, "Stop and Pause").
CONTROL_CHECK_SECONDS = 0.5
PAUSE_POLL_SECONDS = 0.2


def stopped_message(decision: str, step: int, while_doing: str = "") -> str:
    """What a run ended by `decision` ("stop": a request; "gone": the app closed) at `step` says."""
    if decision == "gone":
        return "Stopped: the app that started this run has closed. Resume it from the UI or CLI."
    return f"Stopped by request at step {step}" + (f", {while_doing}" if while_doing else "") + "."


def paused_message(step: int) -> str:
    return f"Paused at step {step}."


def stepped_words(count: int, updates: str) -> str:
    """What a Step of `count` updates ("both" nets, or "d" / "g" alone) trains, in words:
    "10 generator updates", "1 update of D alone"."""
    plural = "s" if count != 1 else ""
    if updates == "both":
        return f"{count} generator update{plural}"
    return f"{count} update{plural} of {updates.upper()} alone"


class Control:
    def __init__(self, run, watch_pids=(), app_closing=None):
        """run: the RunDir whose request file the UI and the CLI write; watch_pids: processes
        whose end stops the run (the app that started it); app_closing: says whether the app is
        closing, for a decision taken inside the app itself (the chunk chain), whose end no pid shows."""
        self.run = run
        self.watch_pids = [p for p in (watch_pids or ()) if p and p != os.getpid()]
        self.app_closing = app_closing or (lambda: False)
        self._last_check = 0.0
        self._cpu_share_taken = None   # the last share of the CPU acted on (RunDir.read_cpu_share)

    def decision(self) -> str:
        """The app gone first, then a stop (RunDir.request keeps it whatever is pressed after it), a pause."""
        return self._decision(self.run.read_request())

    def _decision(self, request: str) -> str:
        if self.app_closing() or any(not pid_alive(p) for p in self.watch_pids):
            return "gone"
        return {"stop": "stop", "pause": "pause", "step": "step"}.get(request, "run")

    def request_waiting(self) -> bool:
        """Between log steps, at most every CONTROL_CHECK_SECONDS: is there something to act on?"""
        now = time.perf_counter()
        if now - self._last_check < CONTROL_CHECK_SECONDS:
            return False
        self._last_check = now
        return self.decision() != "run" or bool(self.run.read_settings())

    def step_count(self) -> int:
        """How many generator updates a Step asks for (0 if none)."""
        return self.run.read_step_count()

    def step_updates(self) -> str:
        """Which nets a Step trains: "both", or "d" / "g" alone."""
        return self.run.read_step_updates()

    def settings(self) -> dict:
        """The values of a settings change the host asked for since the last call; {} if none. Taken
        once: the file goes (unless a newer change replaced it meanwhile, which the next call takes)."""
        asked = self.run.read_settings()
        if asked:
            self.run.clear_settings(asked["time"])
        return asked.get("values", {})

    def cpu_threads(self) -> int | None:
        """The CPU threads asked for (0: all) since the last call, None if nothing new."""
        share = self.run.read_cpu_share()
        if share is None or share == self._cpu_share_taken:
            return None
        self._cpu_share_taken = share
        return share[0]

    def paused_again(self) -> None:
        """A Step is done with: the run stays paused."""
        self.run.request("pause")

    def ended(self) -> None:
        """The run has ended: no request is left for the next session."""
        self.run.clear_request()

    def wait_while_paused(self) -> str:
        """Wait until the pause request is gone; then the decision ("run" once resumed: the
        Resume is cleared; "step": train the asked updates, still paused)."""
        return wait_out_pause(self.decision, self.run)

    def between_chunks(self, paused: bool) -> str:
        """Between two chunks of a chunked run, without waiting (the app holds no GPU meanwhile):
        "stop" or "gone" end the run; "resume" goes on from a pause (the Resume is cleared, as
        wait_while_paused clears it); "run" goes on; "pause" waits, for a run the app paused (a GPU
        refused, a chunk aborted) until a Resume, or for a Pause the last chunk had no time to
        hear. A Step is a pause here: a paused chunked run holds no GPU to step with."""
        request = self.run.read_request()
        decision = self._decision(request)
        if decision == "run" and request == "resume":
            self.run.clear_request("resume")   # only the Resume: a Stop pressed since must still be heard
            return "resume"
        if decision == "step" or (decision == "run" and paused):
            return "pause"
        return decision


def wait_out_pause(decision, run) -> str:
    """decision() until it is no longer "pause"; then that decision. run: the RunDir whose Resume is
    cleared once the run goes on (None for a process that never writes the run)."""
    while (decided := decision()) == "pause":
        time.sleep(PAUSE_POLL_SECONDS)
    if decided == "run" and run is not None:
        run.clear_request("resume")   # only the Resume: a Stop pressed since must still be heard
    return decided
