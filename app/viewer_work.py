"""Work that viewers trigger (samples, GIFs, neighbours, timelapses, dataset previews), run in
processes of their own at the lowest CPU priority.

On two cores the trainer needs both: when a viewer's request takes a core, its two threads wait
on each other and it runs several times slower (lab/README.md, "Soak"). Nice
10 threads in the UI process still cost it most of its speed under a flood of requests, and
SCHED_IDLE threads there stalled the live view too: an idle thread descheduled while it holds the
GIL blocks every other thread. Here the work has its own processes, so its own GILs, at nice 19:
it gets the cores the trainer leaves free and a small share beside it (CFS weight 15 against the
trainer's 1024 per thread). Not SCHED_IDLE: that gets nothing while anything else runs (a
classroom's browsers, the trainer), and a student's sample of the live run then waited minutes.
The UI process keeps only the cheap part of each request (checking the numbers, choosing the
files), and its memory no longer holds decoded images and generators.

`run(fn, *args)`: fn must be a module-level function and its arguments and result plain picklable
values; it may keep module-level caches, which live in the worker. One worker: requests queue for
it, so their memory is one request's however many viewers ask, and its caches (generators, the
nearest-neighbour pool) exist once. (Two grew to 1.7 GB together in the issue-13 soak, against
the UI's 0.65 GB.) After each request the worker hands freed heap back to the system
(malloc_trim): glibc otherwise keeps the peak of every decoded batch. The worker starts with the
app (warm_up): one started later, beside a busy trainer, would take its imports at nice 19.
"""
from __future__ import annotations

import ctypes
import errno
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from core.rundir import DISK_FULL

VIEWER_WORKERS = 1
# How far viewers' heavy work yields to the trainer (bench/README.md, "Viewer work beside training").
WORKER_NICE = int(os.environ.get("BLINK_VIEWER_NICE", "19"))
# The modules whose functions viewers' requests run here (no Gradio among them), and core.sample,
# which app.sample_work imports only inside them (the UI process imports sample_work too).
WORK_MODULES = ("app.sample_work", "app.dataset_work", "core.sample")
PARENT_CHECK_SECONDS = 1.0

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _behind_the_trainer(app_pid: int) -> None:
    """A worker's set-up: gone when the app is, its imports, then the lowest priority and one torch
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
        os.nice(WORKER_NICE)   # before torch starts its threads: Linux threads inherit it
    except (AttributeError, OSError):
        pass


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _in_worker(fn, args):
    try:
        return fn(*args)
    finally:
        try:
            ctypes.CDLL(None).malloc_trim(0)   # glibc; elsewhere there is nothing to trim
        except (OSError, AttributeError):
            pass


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # spawn: fork would copy the UI's threads and locks mid-flight (and torch's can deadlock).
            _pool = ProcessPoolExecutor(VIEWER_WORKERS, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_behind_the_trainer, initargs=(os.getpid(),))
        return _pool


def _discard(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def warm_up() -> None:
    """Start the workers now (imports take seconds), so no viewer's request waits for one. Tasks
    submitted together while none is idle each start a worker."""
    pool = _get_pool()
    for _ in range(VIEWER_WORKERS):
        pool.submit(os.getpid)


def shutdown() -> None:
    if _pool is not None:
        _discard(_pool)


def run(fn, *args):
    """fn(*args) in a viewer-work process; its result, or its error raised here."""
    from app.errors import refused   # here, not at the top: the workers import this module, never Gradio
    pool = _get_pool()
    try:
        future = pool.submit(_in_worker, fn, args)
    except BrokenProcessPool:
        # The worker died between requests (the kernel's OOM killer, a kill by hand): not this
        # request's doing, so a new pool serves it.
        _discard(pool)
        pool = _get_pool()
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
