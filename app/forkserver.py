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
import multiprocessing.util
import os
import tempfile
import threading

# What the app's processes import before their first piece of work. torch._dynamo first:
# torch.optim.Adam's first construction imports it, which alone takes seconds.
PRELOAD = ("torch._dynamo", "core.train", "core.data", "core.devices", "core.losses", "core.models",
           "core.quality", "core.training", "core.sample", "app.supervisor", "app.sample_work", "app.dataset_work")


class _Popen(multiprocessing.popen_forkserver.Popen):
    """The fork server sends a child's exit code down a pipe once: two threads polling together
    (a viewer's reap beside the Stop watchdog, multiprocessing's own clean-up at the next start)
    would both read it, and the second would record 255 over the real code, a SIGKILL included.
    The read is made under a lock, and only once; every thread then sees the code it read."""
    _read_lock = threading.Lock()

    def poll(self, flag=os.WNOHANG):
        if self.returncode is None:
            exited = multiprocessing.connection.wait([self.sentinel], 0 if flag == os.WNOHANG else None)
            # Not `exited` may also mean that another thread read the code a moment ago (the pipe is
            # empty until the fork server closes it): that read was under this lock, so it is set now.
            with self._read_lock:
                if self.returncode is None and exited:
                    super().poll(os.WNOHANG)
        return self.returncode


class ForkedProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class _Context(multiprocessing.context.ForkServerContext):
    Process = ForkedProcess


_CONTEXT = _Context()
# Linux's sun_path: the longest path a Unix socket can have, its final NUL included.
UNIX_SOCKET_PATH_MAX = 108
# The socket the fork server listens on: multiprocessing's temporary folder, then a file in it.
SOCKET_PATH_LENGTH = len("/pymp-xxxxxxxx/listener-xxxxxxxx") + 1


def _socket_folder_short_enough() -> None:
    """The fork server listens on a Unix socket in multiprocessing's temporary folder, made under
    TMPDIR: a long TMPDIR (a test's, a cluster job's) failed the app's start with "AF_UNIX path too
    long". That folder is then made under /tmp, as newer Pythons' multiprocessing does itself."""
    if len(tempfile.gettempdir()) + SOCKET_PATH_LENGTH <= UNIX_SOCKET_PATH_MAX or not os.path.isdir("/tmp"):
        return
    asked, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        multiprocessing.util.get_temp_dir()   # made now, kept for this process's sockets
    finally:
        tempfile.tempdir = asked


def context() -> multiprocessing.context.BaseContext:
    """The multiprocessing context whose processes are forks of the fork server (started at the
    first process if start() was not called)."""
    _socket_folder_short_enough()
    multiprocessing.forkserver.set_forkserver_preload(list(PRELOAD))
    return _CONTEXT


def start() -> None:
    """Start the fork server now, so that its imports are paid before anyone waits on a process."""
    context()
    multiprocessing.forkserver.ensure_running()
