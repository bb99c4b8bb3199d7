"""The CLI as its own process, without paying Python's and torch's start each time.

`python -m core.train ARGS` imports torch (and torch._dynamo, which torch.optim's first optimizer
imports) before its first step, most of a short run's CPU, and the suite runs dozens of CLI runs
(bench/README.md, "The suite"). Here each is a fork of one interpreter that imported them once: the
app's fork server (app/forkserver.py), started once per test process. The child then does what
`python` does with its arguments (runpy, the module run as `__main__`, `sys.argv` as Python sets
it) in a process of its own: its own pid, environment, working folder, session, signals and exit
code, its output in files. What differs from a fresh interpreter is only that the modules are
already imported, so a test of what a fresh process imports (test_xla_cli's probe, test_rows' GAN
row added before anything imports it, test_chunk_rules' spawned child) starts `python` itself, and
so does one CLI run of each entry point (tests/unit/test_core.py). A cold torch_xla import in a
trainer process, after the device layer set its environment, is the app's road
(tests/xla/test_xla_app.py's trainers).

Runs on XLA:CPU (xla=True) fork another interpreter, which imported torch_xla too: torch_xla reads
its environment when imported, so that interpreter starts with the XLA tests' own
(tests/xla/xlahelpers.py xla_env: PJRT_DEVICE=CPU, the fast-compile XLA_FLAGS), the same for every
run; what differs between runs (CPU_NUM_DEVICES) is read when a run opens its devices, after the fork.

    run_cli(["-m", "core.train", ...], env={...}) -> subprocess.CompletedProcess
    start_cli([...], new_session=True, xla=False) -> CliProcess (pid, poll, wait, send_signal, output)
"""
from __future__ import annotations

import functools
import io
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.reduction
import multiprocessing.spawn
import multiprocessing.util
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
import weakref

from app import forkserver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _as_python_would(args: list[str], env: dict, cwd: str, out: str, err: str, new_session: bool) -> None:
    """In the forked child: `python ARGS` with `env` as its whole environment."""
    if new_session:
        os.setsid()
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(handle, fd)
        os.close(handle)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    if env.get("OMP_NUM_THREADS", "").isdigit():
        # torch took its thread count from the fork server's environment; a fresh one takes this one's.
        import torch
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    if args[0] == "-m":
        # The module is imported already (the fork server's preload): runpy's warning that it then
        # runs a second copy as __main__ says what `python -m` does anyway.
        warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
        sys.argv = [args[1], *args[2:]]     # runpy replaces argv[0] with the module's file, as -m does
        sys.path.insert(0, cwd)
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path.insert(0, "")
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")


# What the XLA interpreter imports once: torch_xla's modules that the device layer uses, then what the
# app's fork server imports, and the doctor.
XLA_PRELOAD = ("torch_xla", "torch_xla.core.xla_model", "torch_xla.runtime", "torch_xla.distributed.spmd",
               "torch_xla.debug.metrics", *forkserver.PRELOAD, "core.doctor")


@functools.lru_cache(maxsize=None)
def _xla_server() -> multiprocessing.forkserver.ForkServer:
    """A fork server of its own (not multiprocessing's one, the app's and the CPU runs'), started in
    the XLA tests' environment."""
    from tests.xla.xlahelpers import xla_env
    server = multiprocessing.forkserver.ForkServer()
    server.set_forkserver_preload(list(XLA_PRELOAD))
    own = dict(os.environ)
    os.environ.clear()
    os.environ.update(xla_env())     # what the server's Python, and its torch_xla import, read
    try:
        server.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(own)
    return server


class _XlaPopen(forkserver._Popen):
    def _launch(self, process_obj):
        # multiprocessing.popen_forkserver.Popen._launch, asking the XLA server, not the global one.
        prep_data = multiprocessing.spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        multiprocessing.context.set_spawning_popen(self)
        try:
            multiprocessing.reduction.dump(prep_data, buf)
            multiprocessing.reduction.dump(process_obj, buf)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        self.sentinel, w = _xla_server().connect_to_new_process(self._fds)
        parent_w = os.dup(w)
        self.finalizer = multiprocessing.util.Finalize(self, multiprocessing.util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = multiprocessing.forkserver.read_signed(self.sentinel)


class _XlaProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _XlaPopen(process_obj)


class CliProcess:
    """A started CLI process, read as a subprocess.Popen is."""

    def __init__(self, args: list[str], env: dict | None = None, cwd: str = ROOT, new_session: bool = False,
                 xla: bool = False):
        self.args = list(args)
        self.folder = tempfile.mkdtemp(prefix="cli-")   # its output files, removed with this object
        self.remove_output = weakref.finalize(self, shutil.rmtree, self.folder, True)
        self._out, self._err = os.path.join(self.folder, "stdout"), os.path.join(self.folder, "stderr")
        process_class = _XlaProcess if xla else forkserver.context().Process
        self._process = process_class(
            target=_as_python_would, args=(self.args, dict(os.environ if env is None else env), cwd,
                                           self._out, self._err, new_session), daemon=False)
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """(stdout, stderr) as written so far."""
        def read(path: str) -> str:
            try:
                with open(path, errors="replace") as f:
                    return f.read()
            except OSError:
                return ""
        return read(self._out), read(self._err)


def start_cli(args: list[str], env: dict | None = None, cwd: str = ROOT, new_session: bool = False,
              xla: bool = False) -> CliProcess:
    return CliProcess(args, env, cwd, new_session, xla)


def run_cli(args: list[str], env: dict | None = None, cwd: str = ROOT, timeout: float = 300.0,
            check: bool = False, xla: bool = False) -> subprocess.CompletedProcess:
    """`python ARGS` to its end, as subprocess.run(capture_output=True, text=True) answers it."""
    process = start_cli(args, env, cwd, xla=xla)
    try:
        process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    stdout, stderr = process.output()
    process.remove_output()
    done = subprocess.CompletedProcess([sys.executable, *args], process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done

