"""Work that viewers trigger (samples, GIFs, neighbours, timelapses, dataset previews), run in
processes of their own, behind the trainer.

On two cores the trainer needs both: when a viewer's request takes a core, its two threads wait
on each other and it runs several times slower (lab/README.md, "Soak"). Nice
10 threads in the UI process still cost it most of its speed under a flood of requests, and
SCHED_IDLE threads there stalled the live view too: an idle thread descheduled while it holds the
GIL blocks every other thread. Here the work has its own processes, so its own GILs, at a lower
priority than the trainer's (CFS weight 110 at nice 10, 15 at nice 19, against the trainer's 1024
per thread). Not SCHED_IDLE: that gets nothing while anything else runs (a classroom's browsers,
the trainer), and a student's sample of the live run then waited minutes. The UI process keeps
only the cheap part of each request (checking the numbers, choosing the files), and its memory
no longer holds decoded images and generators.

`run(fn, *args)`: fn must be a module-level function and its arguments and result plain picklable
values; it may keep module-level caches, which live in the worker. Two workers, a lane each, so
a student's look at the generator never waits behind a file being made (bench/README.md,
"Viewer work beside training"): the quick lane (samples, strips, directions, grids of the run,
the dataset preview) at nice 10, a sample back quickly beside a training run; the heavy
lane (zips, GIFs, neighbours, timelapses, uploads) at nice 19 and, while a run trains, resting between requests, so
that it takes at most HEAVY_SHARE of a core however many ask. In each lane requests take turns,
so their memory is one request's however many viewers ask; more than MAX_WAITING waiting are told
at once to try again. After each request a worker hands freed heap back to the system
(malloc_trim): glibc otherwise keeps the peak of every decoded batch. A worker takes its imports
at the app's own priority, before it lowers its own (at nice 19 beside a busy trainer they took
minutes), and the quick lane's starts with the app (warm_up).
"""
from __future__ import annotations

import ctypes
import errno
import collections
import itertools
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from core.rundir import DISK_FULL

# How far each lane's work yields to the trainer: the quick lane's priority (a student waits on it),
# the heavy lane's (files to download, which may wait); bench/README.md, "Viewer work beside training".
QUICK_NICE = int(os.environ.get("BLINK_VIEWER_NICE", "10"))
HEAVY_NICE = 19
# The most of one core the heavy lane takes while a run trains, however many ask: it rests after
# each request in proportion to the CPU that request took. The quick lane needs no rest: a busy
# room's looks take little of a core (bench/README.md, "Viewer work beside training"), and a
# student waits on it.
HEAVY_SHARE = float(os.environ.get("BLINK_VIEWER_HEAVY_SHARE", "0.05"))
# The modules whose functions viewers' requests run here (no Gradio among them), and core.sample,
# which app.sample_work imports only inside them (the UI process imports sample_work too).
WORK_MODULES = ("app.sample_work", "app.dataset_work", "core.sample")
PARENT_CHECK_SECONDS = 1.0
# What a student waits on: a look at the generator or the dataset. Everything else is heavy.
QUICK_WORK = {"sample_grid", "interpolation_strip", "explored_image", "read_png", "preview",
              "check_data_path"}
# Requests waiting in a lane beyond this are refused at once, with words, rather than queued for
# minutes: a room's worth of samples still waits.
MAX_WAITING = int(os.environ.get("BLINK_VIEWER_QUEUE", "24"))

_pools: dict[bool, ProcessPoolExecutor] = {}   # by quick
_pool_lock = threading.Lock()


class _Turns:
    """A lane's requests, one in its worker at a time, in the order they came; between turns, while a
    run trains (rest_while), the lane rests in proportion to the CPU its last request took, so that
    it takes at most `share` of a core however many ask. (The pool's own queue would take them all
    at once, and no rest.)"""

    def __init__(self, share: float = 1.0):
        self.share = share
        self._changed = threading.Condition()
        self._waiting: collections.deque[int] = collections.deque()
        self._tickets = itertools.count()
        self._serving: int | None = None
        self._rest_until = 0.0

    def take(self) -> None:
        """Wait for this request's turn. Raises Busy when MAX_WAITING requests already wait."""
        with self._changed:
            if len(self._waiting) >= MAX_WAITING:
                raise Busy(len(self._waiting))
            ticket = next(self._tickets)
            self._waiting.append(ticket)
            self._hand_on()
            while self._serving != ticket:
                self._changed.wait(max(self._rest_until - time.monotonic(), 0.0) or None)
                self._hand_on()

    def done(self, cpu_seconds: float = 0.0) -> None:
        """The request's turn is over; it took `cpu_seconds` of the worker's CPU."""
        with self._changed:
            self._serving = None
            if self.share < 1.0 and _training():
                self._rest_until = time.monotonic() + cpu_seconds * (1.0 / self.share - 1.0)
            self._hand_on()
            self._changed.notify_all()   # resting: the waiters wait out the rest, then hand on

    def _hand_on(self) -> None:
        if self._serving is None and self._waiting and time.monotonic() >= self._rest_until:
            self._serving = self._waiting.popleft()
            self._changed.notify_all()


class Busy(Exception):
    """Too many viewers' requests are waiting for the worker."""


_turns = {True: _Turns(), False: _Turns(HEAVY_SHARE)}   # by quick
_training = lambda: True   # noqa: E731  (rest_while sets it)


def rest_while(training) -> None:
    """The lanes rest between requests only while `training()`: with no run beside it, a room's
    looks and files come as fast as the workers make them."""
    global _training
    _training = training


def _behind_the_trainer(app_pid: int, nice: int) -> None:
    """A worker's set-up: gone when the app is, its imports, then its lane's priority and one torch
    thread. The imports (seconds of CPU) come at the app's own priority: at nice 19 beside a
    starting trainer they took minutes, and the first viewer waited for them."""
    # Gone with the app, kill -9 included, also one killed before this worker got here (so the
    # app's pid comes from the app). Not PR_SET_PDEATHSIG: that fires when the parent *thread*
    # that started the worker exits, and Gradio's worker threads come and go.
    threading.Thread(target=_exit_with, args=(app_pid,), daemon=True).start()
    import importlib
    import torch
    for module in WORK_MODULES:
        importlib.import_module(module)
    torch.set_num_threads(1)
    try:
        os.nice(nice)   # before torch starts its threads: Linux threads inherit it
    except (AttributeError, OSError):
        pass


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
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


def _get_pool(quick: bool) -> ProcessPoolExecutor:
    with _pool_lock:
        if quick not in _pools:
            # spawn: fork would copy the UI's threads and locks mid-flight (and torch's can deadlock).
            _pools[quick] = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_behind_the_trainer,
                                                initargs=(os.getpid(), QUICK_NICE if quick else HEAVY_NICE))
        return _pools[quick]


def _discard(pool: ProcessPoolExecutor) -> None:
    with _pool_lock:
        for quick, kept in list(_pools.items()):
            if kept is pool:
                del _pools[quick]
    pool.shutdown(wait=False, cancel_futures=True)


def warm_up() -> None:
    """Start the quick lane's worker now (imports take seconds), so no student's first look waits
    for one. The heavy lane's starts with its first request: a file may wait, and the app's start
    (and every test's) does not pay for a second torch import."""
    _get_pool(True).submit(os.getpid)


def shutdown() -> None:
    for pool in list(_pools.values()):
        _discard(pool)


def run(fn, *args):
    """fn(*args) in its lane's viewer-work process, in its turn; its result, or its error raised here."""
    from app.errors import refused   # here, not at the top: the workers import this module, never Gradio
    quick = fn.__name__ in QUICK_WORK
    try:
        _turns[quick].take()
    except Busy as busy:   # before waiting: refused at once
        raise refused(f"The sampler is busy: {busy.args[0]} requests from this room are ahead of yours. "
                      "Try again in a few seconds.", title="Busy") from None
    cpu_seconds = 0.0
    try:
        result, cpu_seconds = _run_now(quick, fn, args, refused)
        return result
    finally:
        _turns[quick].done(cpu_seconds)


def _run_now(quick: bool, fn, args, refused):
    pool = _get_pool(quick)
    try:
        future = pool.submit(_in_worker, fn, args)
    except BrokenProcessPool:
        # The worker died between requests (the kernel's OOM killer, a kill by hand): not this
        # request's doing, so a new pool serves it.
        _discard(pool)
        pool = _get_pool(quick)
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
