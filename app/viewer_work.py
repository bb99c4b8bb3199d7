"""Work that viewers trigger (samples, GIFs, neighbours, timelapses, dataset previews): few at a
time, at a lower CPU priority than the trainer.

On two cores the trainer needs both: when a viewer's request takes a core, its two threads wait
on each other and it runs 5-6x slower (bench/README.md, bench_threads and the issue-13 soak). So
the UI process runs such work in a small pool of its own threads, each at nice 10 (Linux nice
values are per thread), never more than VIEWER_WORKERS at once, which also bounds the memory the
work can hold however many viewers ask. Everything else (status, the live view, Start/Stop) stays
at normal priority on Gradio's own threads. This shrinks the work's share but does not stop it
costing the trainer (the soak: still 0.2x under a flood of requests). SCHED_IDLE would, but an
idle thread descheduled while it holds the GIL stalls the live view too; the real fix is this
work in a process of its own.
"""
from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor

VIEWER_WORKERS = 2
VIEWER_NICE = 10          # CFS weight ~1/10 of the trainer's when both want a core

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _behind_the_trainer() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), VIEWER_NICE)
    except (AttributeError, OSError):
        pass   # not Linux, or not allowed: the pool still bounds how much runs at once


def run(fn, *args):
    """fn(*args) on a viewer-work thread, with the caller's context variables; its result or error."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(VIEWER_WORKERS, thread_name_prefix="viewer-work",
                                       initializer=_behind_the_trainer)
    return _pool.submit(contextvars.copy_context().run, fn, *args).result()
