"""When a Stop the trainer has not answered becomes a kill, and when a trainer is shown to everyone
as not answering (core/heartbeat.py): by the trainer's own reports, not by a clock from the click."""
import os
import threading
import time

from core.config import TrainConfig
from core.heartbeat import BUSY_SECONDS, Heartbeat, silent_since, unanswered
from core.rundir import RunDir
from tests.filehelpers import cpu_plan

GRACE = 20.0


def beat(now, **values):
    return {"time": now - 1, "doing": "training", "since": now - 100, "step": 7, "step_time": now - 1,
            "step_seconds": 0.5, "compiled_at": 0.0, **values}


def test_a_silent_trainer_is_stuck_a_busy_one_is_waited_for():
    now = 10_000.0
    assert unanswered(beat(now, time=now - 25), now, now - 30, GRACE) == "it has not answered for 25 s"
    # Compiling for 10 minutes, beating all along: waited for, until BUSY_SECONDS.
    compiling = beat(now, doing="compiling", since=now - 600, step_time=now - 600)
    assert unanswered(compiling, now, now - 590, GRACE) == ""
    assert unanswered(beat(now, doing="compiling", since=now - BUSY_SECONDS - 1), now, now - 60, GRACE) \
        == f"it has been compiling for {BUSY_SECONDS + 1:.0f} s"
    assert unanswered(beat(now, doing="loading data", since=now - 300), now, now - 300, GRACE) == ""


def test_a_step_that_does_not_return_after_the_click_is_a_wedge():
    now = 10_000.0
    # Beating (its heartbeat thread lives) but the step has not moved since the click, 21 s ago.
    hung = beat(now, step_time=now - 40)
    assert unanswered(hung, now, now - 21, GRACE).startswith("its step did not return within 20 s")
    assert unanswered(hung, now, now - 19, GRACE) == ""            # within the grace of the click
    assert unanswered(beat(now, step=8), now, now - 21, GRACE) == ""   # a step returned: Stop comes next
    # One step on from the click (a rank that then waits on a wedged one), and that step hangs.
    assert unanswered(beat(now, step=8, step_time=now - 21), now, now - 30, GRACE).startswith("its step did not")
    # A step that compiled 5 s ago (its graphs compile in bursts) is timed from its last compile.
    assert unanswered(beat(now, step_time=now - 40, compiled_at=now - 5), now, now - 21, GRACE) == ""
    # A run whose steps take 3 s each is given ten of them; its first steps, as long as a compile.
    slow = beat(now, step_time=now - 40, step_seconds=3.0)
    assert unanswered(slow, now, now - 25, GRACE) == ""
    assert unanswered(slow, now, now - 31, GRACE).startswith("its step did not return within 30 s")
    assert unanswered(beat(now, step=1, step_time=now - 300, step_seconds=None), now, now - 200, GRACE) == ""


def _next_beat(run, after: float, timeout: float = 60.0) -> dict:
    """The first beat written after the time `after`: what the heartbeat's thread wrote next."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = run.read_heartbeat()
        if last.get("time", 0.0) > after:
            return last
        time.sleep(0.05)
    raise AssertionError(f"no beat within {timeout} s")


def test_the_heartbeat_thread_beats_while_the_main_thread_is_busy(tmp_path):
    run = RunDir.create(cpu_plan(), str(tmp_path))
    compiling = [False]
    said = []
    pulse = Heartbeat(run, compiling=lambda: compiling[0])
    pulse.on_compiling = lambda: said.append(time.time())
    others = set(threading.enumerate())
    pulse.start()
    try:
        pulse.doing("loading data")
        first = _next_beat(run, after=time.time())   # the main thread is busy: the beats go on
        assert first["doing"] == "loading data"
        compiling[0] = True
        during = _next_beat(run, after=first["time"])
        if during["doing"] != "compiling":   # the beat came before the thread looked again
            during = _next_beat(run, after=during["time"])
        assert during["doing"] == "compiling" and during["compiled_at"] > first["time"] and len(said) == 1
        compiling[0] = False
        pulse.stepped(3)
        after = _next_beat(run, after=during["time"])
        if after["doing"] == "compiling":
            after = _next_beat(run, after=after["time"])
        assert after["doing"] == "loading data" and after["step"] == 3
    finally:
        pulse.stop()
    # A stopped (or frozen) trainer beats no more: its thread has ended.
    assert not [t for t in set(threading.enumerate()) - others if t.name == "blink-heartbeat"]


def test_a_trainer_silent_past_the_bound_is_said_silent_since_its_last_sign_of_life():
    now = 10_000.0
    assert silent_since(beat(now, time=now - 25), now, GRACE) == now - 25
    assert silent_since(beat(now, time=now - 15), now, GRACE) is None
    # Compiling or loading data: a native compiler or decoder may hold the beat, up to BUSY_SECONDS.
    for doing in ("compiling", "loading data"):
        assert silent_since(beat(now, doing=doing, time=now - 600), now, GRACE) is None
        assert silent_since(beat(now, doing=doing, time=now - BUSY_SECONDS - 1), now, GRACE) == now - BUSY_SECONDS - 1
    # Saving beats from the heartbeat's own thread: silent there is frozen, as the Stop watchdog sees it.
    assert silent_since(beat(now, doing="saving the checkpoint", time=now - 25), now, GRACE) == now - 25
    # A status written after a "starting" beat: the trainer has moved on, and is silent past the bound.
    assert silent_since(beat(now, doing="starting", time=now - 30), now, GRACE, heard_at=now - 25) == now - 25
    # A status written after the last beat is a sign of life too; before any beat the trainer is starting.
    assert silent_since(beat(now, time=now - 25), now, GRACE, heard_at=now - 5) is None
    assert silent_since({}, now, GRACE, heard_at=now - 600) is None
    assert silent_since({}, now, GRACE, heard_at=now - BUSY_SECONDS - 1) == now - BUSY_SECONDS - 1
    assert silent_since({}, now, GRACE) is None   # never heard from: nothing to count from


def test_a_stopped_heartbeat_reads_silent_once_the_bound_has_passed(tmp_path):
    run = RunDir.create(cpu_plan(), str(tmp_path))
    pulse = Heartbeat(run).start()
    pulse.doing("training")
    _next_beat(run, after=time.time())   # one beat from the thread, saying what the trainer does
    pulse.stop()
    last = run.read_heartbeat()
    assert last["pid"] == os.getpid() and last["doing"] == "training"   # whose beat it is: the job checks
    assert silent_since(last, time.time(), GRACE) is None
    assert silent_since(last, last["time"] + GRACE + 1, GRACE) == last["time"]


def test_a_compile_notice_read_as_the_run_ends_never_lands_over_its_final_status(tmp_path, monkeypatch):
    """The heartbeat's thread says "compiling" when it sees a compile begin, if the run still reads
    "running" (core/train.py say_compiles); the trainer's thread may write the run's final status in
    between that read and that write. Held apart by the heartbeat's status lock, which the trainer's
    status writes take (Loop._status): the final "done" stays, not "compiling" for good."""
    import threading
    from types import SimpleNamespace
    from core.train import say_compiles
    run = RunDir.create(cpu_plan(), str(tmp_path))
    run.write_status("running", "Training.")
    compiling, read = threading.Event(), threading.Event()
    pulse = Heartbeat(run, compiling=compiling.is_set)
    say_compiles(pulse, run, SimpleNamespace(compiling=compiling.is_set))
    real_read = RunDir.read_status

    wrote, noticed = threading.Event(), threading.Event()

    def read_slowly(self):   # the heartbeat's read, then room for the trainer's write to come between
        status = real_read(self)
        if threading.current_thread().name == "blink-heartbeat":
            read.set()
            wrote.wait(2)   # without the lock the final write lands here; with it, it cannot until this is done
        return status
    monkeypatch.setattr(RunDir, "read_status", read_slowly)
    say = pulse.on_compiling
    pulse.on_compiling = lambda: (say(), noticed.set())
    pulse.start()
    try:
        compiling.set()                         # the final grid's graph begins to compile
        assert read.wait(60)
        with pulse.status_lock:                 # the trainer's final status, as Loop._status writes it
            run.write_status("done", "Finished.")
        wrote.set()
        assert noticed.wait(60)                 # the notice has been written, or not, by now
    finally:
        pulse.stop()
    assert real_read(run).state == "done"
