"""The fork server every process of the app's own is forked from: trainers and viewer work.

Each of those processes needs torch, whose imports take seconds of CPU. The fork server imports
them once, at the app's start, while nobody waits; a trainer (each chunk of a chunked run too) or a
viewer-work worker is then a fork of it that begins at once. Not a fork of the UI process itself:
that holds Gradio's threads and locks mid-flight. The fork server is a fresh interpreter that has
only imported (torch starts no thread on import), so a fork of it is as safe as a spawn; torch_xla
and CUDA are initialised in the process that trains, never here.

    start()                                        # at the app's start
    context().Process(target=..., args=...)        # a process forked from it
"""
from __future__ import annotations

import multiprocessing.connection
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.popen_forkserver
import os
import threading

# What the app's processes import before their first piece of work. torch._dynamo first:
# torch.optim.Adam's first construction imports it, which alone takes seconds.
PRELOAD = ("torch._dynamo", "core.train", "core.data", "core.devices", "core.losses", "core.models",
           "core.quality", "core.training", "core.sample", "app.supervisor", "app.sample_work", "app.dataset_work")


class _Popen(multiprocessing.popen_forkserver.Popen):
    """The fork server sends a child's exit code down a pipe once: two threads polling together
    (a viewer's reap beside the Stop watchdog, multiprocessing's own clean-up at the next start)
    would both read it, and the second would record 255 over the real code, a SIGKILL included.
    The read is made under a lock, and only once."""
    _read_lock = threading.Lock()

    def poll(self, flag=os.WNOHANG):
        if self.returncode is None:
            if not multiprocessing.connection.wait([self.sentinel], 0 if flag == os.WNOHANG else None):
                return None
            with self._read_lock:
                return super().poll(os.WNOHANG)
        return self.returncode


class ForkedProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class _Context(multiprocessing.context.ForkServerContext):
    Process = ForkedProcess


_CONTEXT = _Context()


def context() -> multiprocessing.context.BaseContext:
    """The multiprocessing context whose processes are forks of the fork server (started at the
    first process if start() was not called)."""
    multiprocessing.forkserver.set_forkserver_preload(list(PRELOAD))
    return _CONTEXT


def start() -> None:
    """Start the fork server now, so that its imports are paid before anyone waits on a process."""
    context()
    multiprocessing.forkserver.ensure_running()
