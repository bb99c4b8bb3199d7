"""The trainer's pulse, and when a Stop it has not answered becomes a kill.

A thread of the trainer's own writes the run's heartbeat.json every BEAT_SECONDS: the time, what
the trainer is doing and since when, and the last step that returned. It beats while the main
thread is busy (an XLA compile releases Python's lock), so the app can tell a trainer that is
compiling or loading data, which can take minutes on a TPU, from one that is wedged: a stopped
process (SIGSTOP, a lost node) stops beating, and a step on a hung device never returns.

    beat = Heartbeat(run, compiling=rt.compiling).start()
    beat.doing("loading data"); ...; beat.stepped(step); ...; beat.stop()
    unanswered(run.read_heartbeat(), now, asked_at, grace)   # the app's Stop watchdog
    silent_since(run.read_heartbeat(), now, bound, heard_at)   # what every viewer is told, Stop or not
"""
from __future__ import annotations

import os
import threading
import time

BEAT_SECONDS = 1.0
LOOK_SECONDS = 0.1   # how often it asks whether a compile has begun (two counters: cheap)
# What may take long without the trainer being stuck: a TPU compiles a large graph for minutes,
# and a dataset's first decode takes as long as it takes. Past this, it is stuck all the same.
BUSY_SECONDS = 1800.0
BUSY = ("starting", "loading data", "compiling", "saving the checkpoint", "measuring quality", "saving the sample grid")
# The first steps build the graphs and run them the first time: as busy as a compile. After them, a
# step that takes this many times the run's usual step (or the grace, if longer) is not coming back.
WARM_UP_STEPS = 3
# What a trainer may do without beating for long: every other busy step beats from its own thread,
# so silence there means a frozen process (the Stop watchdog ends it after its grace too).
SILENT_WHILE = ("starting", "loading data", "compiling")
STUCK_STEP_FACTOR = 10


class Heartbeat:
    def __init__(self, run, compiling=None):
        """run: the RunDir; compiling: a function that says whether the runtime is compiling now
        (core.runtime.Runtime.compiling), asked at each beat."""
        self.run = run
        self.compiling = compiling or (lambda: False)
        self.on_compiling = lambda: None   # called once when a compile is first seen
        # Held by the trainer's status writes and by on_compiling's: a compile notice that read
        # "running" is written before the trainer's next status, never over it (a final "done").
        self.status_lock = threading.Lock()
        self.what, self.since = "starting", time.time()
        self.step, self.step_time = 0, time.time()
        self.step_seconds: float | None = None   # the run's usual step, once past the first ones
        self._compiling_since: float | None = None
        self._compiled_at = 0.0   # the last beat that saw a compile: a step's compiles come in bursts
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="blink-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._look()
        self._beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(2 * BEAT_SECONDS)

    def doing(self, what: str) -> None:
        if what != self.what:
            self.what, self.since = what, time.time()

    def stepped(self, step: int) -> None:
        now = time.time()
        if step > WARM_UP_STEPS:
            seconds = now - self.step_time
            self.step_seconds = seconds if self.step_seconds is None else 0.9 * self.step_seconds + 0.1 * seconds
        self.step, self.step_time = step, now

    def _beat_until_stopped(self) -> None:
        next_beat = time.time() + BEAT_SECONDS
        while not self._stopped.wait(LOOK_SECONDS):
            self._look()
            if time.time() >= next_beat:
                self._beat()
                next_beat = time.time() + BEAT_SECONDS

    def _look(self) -> None:
        """Whether the runtime compiles now: looked at often, so the status says so as a compile starts."""
        try:
            compiling = self.compiling()
        except Exception:   # a runtime that cannot say is taken as not compiling
            compiling = False
        if not compiling:
            self._compiling_since = None
            return
        self._compiled_at = time.time()
        if self._compiling_since is None:
            self._compiling_since = time.time()
            try:
                self.on_compiling()
            except OSError:   # a full disk: the trainer's own next write says so
                pass

    def _beat(self) -> None:
        what, since = self.what, self.since
        if self._compiling_since is not None:
            what, since = "compiling", self._compiling_since
        try:
            # The pid: a resumed run's heartbeat.json is the last trainer's until this one's first beat.
            self.run.write_heartbeat({"time": time.time(), "pid": os.getpid(), "doing": what, "since": since,
                                      "step": self.step, "step_time": self.step_time,
                                      "step_seconds": self.step_seconds, "compiled_at": self._compiled_at})
        except OSError:   # a full disk: the trainer's own writes fail and say so; the beat just skips
            pass


def unanswered(beat: dict, now: float, asked_at: float, grace: float) -> str:
    """Why a Stop asked at `asked_at` should now end the trainer by force, or "" to wait on.

    The clock is the trainer's own reports, not the click: a trainer that beats and says it is
    compiling, loading data or saving, or is in its first steps, is waited for (up to BUSY_SECONDS);
    one that has not beaten for `grace` seconds is stuck, and so is one whose current step, begun
    before or after the click, has taken STUCK_STEP_FACTOR times its usual step (at least `grace`):
    a trainer that hears the Stop does so within a step (a rank of several, one step on from the
    click, may then wait on a wedged one)."""
    last = max(beat.get("time", 0.0), asked_at)   # before its first beat: from the click
    if now - last > grace:
        return f"it has not answered for {now - last:.0f} s"
    doing = beat.get("doing", "starting")
    if doing in BUSY or beat.get("step", 0) < WARM_UP_STEPS:
        busy_for = now - beat.get("since", asked_at)
        return f"it has been {doing} for {busy_for:.0f} s" if busy_for > BUSY_SECONDS else ""
    # A step may compile several graphs, tracing between them: its clock starts at its last compile.
    started = max(beat.get("step_time", 0.0), beat.get("compiled_at", 0.0), asked_at)
    allowed = max(grace, STUCK_STEP_FACTOR * (beat.get("step_seconds") or 0.0))
    if now - started > allowed:
        return f"its step did not return within {allowed:.0f} s (a wedged device or a hung step)"
    return ""


def silent_since(beat: dict, now: float, bound: float, heard_at: float = 0.0) -> float | None:
    """When the trainer was last heard from, if it has been silent longer than `bound` seconds
    (longer than BUSY_SECONDS before its first beat, and while it says it is loading data or
    compiling: a native decoder or compiler may hold the interpreter, and so its beat), else None.

    Heard from: its last beat, or `heard_at` (its last status write) if later: a trainer writes its
    status before its heartbeat starts. A beat of another trainer is no news of this one: pass {}.
    Never heard from at all (no beat, heard_at 0): None, as nothing says when to start counting."""
    beat_time = beat.get("time", 0.0)
    heard = max(beat_time, heard_at)
    if not heard:
        return None
    # No beat yet: the trainer is starting (it writes its status before its heartbeat begins). A beat
    # older than its last status write tells what it did before that write, not now (a trainer
    # frozen in its first second still has only its "starting" beat).
    stale = beat and heard_at > beat_time
    allowed = max(bound, BUSY_SECONDS) if not stale and beat.get("doing", "starting") in SILENT_WHILE else bound
    return heard if now - heard > allowed else None
