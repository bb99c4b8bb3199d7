"""Work that viewers trigger (samples, GIFs, neighbours, timelapses, dataset previews), run in
processes of their own, behind the trainer.

On two cores the trainer needs both, and a viewer's request in the UI process, even at nice 10 or
SCHED_IDLE, slowed it or stalled the live view (the GIL; lab/README.md, "Soak"). So the work has
its own processes at a lower priority than the trainer's; not SCHED_IDLE, which gets nothing
while anything else runs. The UI process keeps only the cheap part of each request.

`run(fn, *args)`: fn is a module-level function, its arguments and result plain picklable values;
its module-level caches live in the worker. A worker per lane (bench/README.md, "Viewer work beside
training"): the quick lane (samples, strips, directions, grids, the dataset preview) at nice 10; the
heavy lane (zips, GIFs, neighbours, timelapses) at nice 19 and, while a run trains, resting between
requests so that it takes at most HEAVY_SHARE of a core. Requests take turns in a lane, so their
memory is one request's; each has a bound and a deadline, and one whose client has gone is dropped.
The host's work (`run_for_host`) has a third lane at the app's priority. A worker is a fork of the
app's fork server (app/forkserver.py), which paid the imports; it returns freed heap (malloc_trim).
"""
from __future__ import annotations

import ctypes
import errno
import collections
import itertools
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from app import forkserver
from core.rundir import DISK_FULL, pid_alive

QUICK, HEAVY, HOST = "quick", "heavy", "host"   # the lanes
# How far each lane yields to the trainer (bench/README.md, "Viewer work beside training"); the host's keeps the app's.
QUICK_NICE = int(os.environ.get("BLINK_VIEWER_NICE", "10"))
HEAVY_NICE = 19
NICE = {QUICK: QUICK_NICE, HEAVY: HEAVY_NICE, HOST: None}
# The most of one core the heavy lane takes while a run trains (it rests in proportion to each request's
# CPU). The quick lane needs no rest: a room's looks take little of a core, and a student waits on it.
HEAVY_SHARE = float(os.environ.get("BLINK_VIEWER_HEAVY_SHARE", "0.05"))
PARENT_CHECK_SECONDS = 1.0
# What a student waits on: a look at the generator or the dataset. Everything else is heavy.
QUICK_WORK = {"sample_grid", "interpolation_strip", "explored_image", "read_png", "preview",
              "check_data_path"}
# Requests waiting in a lane beyond these are refused at once, with words, rather than queued for
# minutes. The quick lane: a room's worth of samples still waits. The heavy lane makes a file at a
# time and, beside a run, rests for most of each second: more than a few waiting would not be made
# within MAX_WAIT_SECONDS (bench/README.md, "A room's files").
MAX_WAITING = int(os.environ.get("BLINK_VIEWER_QUEUE", "24"))
MAX_FILES_WAITING = int(os.environ.get("BLINK_VIEWER_FILES_QUEUE", "8"))
# The longest a viewer's request waits for its turn before it is told to try again: a student still
# watching a spinner after half a minute presses again (and waits twice); one told "busy" comes back.
MAX_WAIT_SECONDS = 30.0
# The Sample tab's file events (app/sample_tab.py) share one Gradio concurrency group larger than the
# heavy lane's bound, so every request beyond it reaches the lane and is refused at once.
FILE_REQUESTS_AT_ONCE = MAX_FILES_WAITING + 4
# How often a waiting request looks whether its client is still there.
GONE_CHECK_SECONDS = 0.5

_pools: dict[str, ProcessPoolExecutor] = {}   # by lane
_pool_lock = threading.Lock()


class _Turns:
    """A lane's requests, one in its worker at a time, in the order they came; between turns, while a
    run trains (rest_while), the lane rests in proportion to the CPU its last request took, so that
    it takes at most `share` of a core however many ask. (The pool's own queue would take them all
    at once, and no rest.) More than `most_waiting` waiting (None: no bound): a request is refused at once."""

    def __init__(self, share: float = 1.0, most_waiting: int | None = MAX_WAITING):
        self.share = share
        self.most_waiting = most_waiting
        self._changed = threading.Condition()
        self._waiting: collections.deque[int] = collections.deque()
        self._tickets = itertools.count()
        self._serving: int | None = None
        self._rest_until = 0.0

    def take(self, wait_at_most: float | None = None, gone=None) -> None:
        """Wait for this request's turn. Raises Busy when the lane already holds `most_waiting`
        requests, or when the turn has not come within `wait_at_most` seconds; Gone once `gone()`
        says its client left."""
        with self._changed:
            if self.most_waiting is not None and len(self._waiting) >= self.most_waiting:
                raise Busy(self._ahead(len(self._waiting)))
            ticket = next(self._tickets)
            self._waiting.append(ticket)
            deadline = None if wait_at_most is None else time.monotonic() + wait_at_most
            self._hand_on()
            while self._serving != ticket:
                now = time.monotonic()
                if gone is not None and gone():
                    self._waiting.remove(ticket)
                    raise Gone()
                if deadline is not None and now >= deadline:
                    ahead = self._ahead(self._waiting.index(ticket))
                    self._waiting.remove(ticket)
                    raise Busy(ahead)
                wake = [t - now for t in (self._rest_until, deadline) if t is not None and t > now]
                if gone is not None:
                    wake.append(GONE_CHECK_SECONDS)
                self._changed.wait(min(wake) if wake else None)
                self._hand_on()
        if gone is not None and gone():   # it left while its turn came: the turn goes on at once
            self.done()
            raise Gone()

    def done(self, cpu_seconds: float = 0.0) -> None:
        """The request's turn is over; it took `cpu_seconds` of the worker's CPU."""
        with self._changed:
            self._serving = None
            if self.share < 1.0 and _training():
                self._rest_until = time.monotonic() + cpu_seconds * (1.0 / self.share - 1.0)
            self._hand_on()
            self._changed.notify_all()   # resting: the waiters wait out the rest, then hand on

    def _ahead(self, waiting_ahead: int) -> int:
        """How many requests are ahead of one with `waiting_ahead` waiting before it: those, and the one served."""
        return waiting_ahead + (self._serving is not None)

    def _hand_on(self) -> None:
        if self._serving is None and self._waiting and time.monotonic() >= self._rest_until:
            self._serving = self._waiting.popleft()
            self._changed.notify_all()


class Busy(Exception):
    """Too many viewers' requests are waiting for the worker; args[0]: how many are ahead."""


class Gone(Exception):
    """The client of a waiting request left: nobody would receive what it made."""


# The host's lane takes turns too (two uploads at once are checked one after the other, so their
# memory is one's), with no bound and no deadline: one person asks.
_turns = {QUICK: _Turns(), HEAVY: _Turns(HEAVY_SHARE, MAX_FILES_WAITING), HOST: _Turns(most_waiting=None)}
_training = lambda: True   # noqa: E731  (rest_while sets it)


def rest_while(training) -> None:
    """The lanes rest between requests only while `training()`: with no run beside it, a room's
    looks and files come as fast as the workers make them."""
    global _training
    _training = training


def _set_up_worker(app_pid: int, nice: int | None) -> None:
    """A worker's set-up: gone when the app is (kill -9 included), one torch thread, its lane's priority."""
    # Not PR_SET_PDEATHSIG: that fires when the parent *thread* exits, and Gradio's threads come and go.
    threading.Thread(target=_exit_with, args=(app_pid,), daemon=True).start()
    import torch
    torch.set_num_threads(1)
    if nice is not None:
        try:
            os.nice(nice)   # before torch starts its threads: Linux threads inherit it
        except (AttributeError, OSError):
            pass


def _exit_with(app_pid: int) -> None:
    while pid_alive(app_pid):
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _in_worker(fn, args):
    """fn(*args), and the CPU seconds it took (its turn's share: _Turns)."""
    started = time.process_time()
    try:
        return fn(*args), time.process_time() - started
    finally:
        try:
            ctypes.CDLL(None).malloc_trim(0)   # glibc; elsewhere there is nothing to trim
        except (OSError, AttributeError):
            pass


def _get_pool(lane: str) -> ProcessPoolExecutor:
    with _pool_lock:
        if lane not in _pools:
            # Forked from the fork server, not the UI: a fork of the UI would copy its threads and locks mid-flight.
            _pools[lane] = ProcessPoolExecutor(1, mp_context=forkserver.context(),
                                               initializer=_set_up_worker, initargs=(os.getpid(), NICE[lane]))
        return _pools[lane]


def _discard(pool: ProcessPoolExecutor) -> None:
    with _pool_lock:
        for lane, kept in list(_pools.items()):
            if kept is pool:
                del _pools[lane]
    pool.shutdown(wait=False, cancel_futures=True)


def warm_up() -> None:
    """Start the quick lane's worker and the host's now, so that neither a student's first look nor
    the host's first upload waits for a process to start. The heavy lane's starts with its first
    request: a file may wait."""
    _get_pool(QUICK).submit(os.getpid)
    _get_pool(HOST).submit(os.getpid)


def shutdown() -> None:
    for pool in list(_pools.values()):
        _discard(pool)


def run(fn, *args):
    """fn(*args) for a viewer, in its lane's viewer-work process and in its turn: its result, or its
    error raised here; refused in words when the lane is busy or the wait too long."""
    return _in_turn(QUICK if fn.__name__ in QUICK_WORK else HEAVY, fn, args)


def run_for_host(fn, *args):
    """The host's fn(*args) (checking an uploaded dataset or generator, installing the generator) in
    the host's lane: never behind the room's files nor the heavy lane's rest (bench/README.md, "A
    room's files"), and at the app's priority: a host asks a few times a class. No bound, no deadline."""
    return _in_turn(HOST, fn, args)


def _in_turn(lane: str, fn, args):
    from app.errors import refused   # here, not at the top: the workers import this module, never Gradio
    try:
        _turns[lane].take(wait_at_most=None if lane == HOST else MAX_WAIT_SECONDS, gone=_client_gone())
    except Busy as busy:
        maker, again = ("sampler", "a few seconds") if lane == QUICK else ("file maker", "a minute")
        raise refused(f"The {maker} is busy: {busy.args[0]} requests from this room are ahead of yours; "
                      f"try again in {again}.", title="Busy") from None
    except Gone:
        raise refused(f"The page that asked for {fn.__name__} left before its turn: nothing was made.",
                      title="Dropped") from None
    cpu_seconds = 0.0
    try:
        result, cpu_seconds = _run_now(lane, fn, tuple(_plain(arg) for arg in args), refused)
        return result
    finally:
        _turns[lane].done(cpu_seconds)


def _plain(value):
    """`value` with its strings plain str: Gradio's NamedString (an upload's path), pickled as one,
    makes the worker import Gradio to read it."""
    if isinstance(value, str):
        return str(value)
    if type(value) in (list, tuple):
        return type(value)(_plain(item) for item in value)
    return value


def _client_gone():
    """For the Gradio event this thread serves: a check whether its client has left; None outside one.
    Gradio marks an event `alive = False` when its client's stream closes but lets its handler run on,
    and the event's gr.Request was answered long before; so the event is found as gr.Info finds it."""
    from gradio.context import LocalContext
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    events = getattr(getattr(blocks, "_queue", None), "event_ids_to_events", None)
    event = events.get(event_id) if events is not None and event_id else None
    if event is None or not hasattr(event, "alive"):
        return None
    return lambda: not event.alive


def _run_now(lane: str, fn, args, refused):
    pool = _get_pool(lane)
    try:
        future = pool.submit(_in_worker, fn, args)
    except BrokenProcessPool:
        # The worker died between requests (the kernel's OOM killer, a kill by hand): not this
        # request's doing, so a new pool serves it.
        _discard(pool)
        pool = _get_pool(lane)
        future = pool.submit(_in_worker, fn, args)
    try:
        return future.result()
    except BrokenProcessPool:
        # A worker died mid-request (out of memory, killed): a new pool serves the next one.
        _discard(pool)
        raise refused("That request stopped the sampler (too big for this server's memory?). "
                      "Try again, with fewer images.", title="Not done")
    except OSError as exc:
        # The files a viewer asks for (GIFs, zips) go to the server's temporary folder: a full or
        # read-only one is the host's to fix, said without its path or errno.
        if exc.errno not in (*DISK_FULL, errno.EROFS):   # not EACCES: a read may raise that too
            raise
        raise refused("The server's disk is full or read-only, so this could not be made: tell the host "
                      "(free space in the temporary folder, or point TMPDIR at a bigger disk).", title="Not done")
