"""What the XLA tests share: running a child on XLA:CPU (PJRT_DEVICE=CPU) with a timeout, and
reading the run directory it wrote.

All XLA work runs in subprocesses: the XLA runtime cannot be re-initialised in-process. Every
subprocess has a timeout: a hang must fail the test, not the CI job.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "tests", "xla_scripts")
XLA_TIMEOUT = 420   # seconds for one XLA subprocess: generous for a loaded 2-core CI machine


# XLA:CPU compiles each graph through LLVM, whose optimisation of the machine code is most of a tiny
# run's CPU. Level 0 skips it: the same graphs, compiled as often (what the tests count), the same
# results to float rounding, in about half the CPU (bench/README.md, "The suite").
FAST_COMPILE = {"XLA_FLAGS": "--xla_backend_optimization_level=0"}


def xla_env(**extra: str) -> dict:
    """The child's environment: repo importable, XLA on the CPU compiling fast, no inherited XLA knobs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CPU_NUM_DEVICES", "XLA_ALWAYS_ALLREDUCE", "BLINK_DISABLE_XLA", "PJRT_DEVICE", "XLA_FLAGS")}
    env.update({"PYTHONPATH": ROOT, "PJRT_DEVICE": "CPU", **FAST_COMPILE, **extra})
    return env


def run_python(args: list[str], timeout: float = XLA_TIMEOUT, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=xla_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    return proc


def check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def run_script(name: str, *args: str, **env: str) -> None:
    check(run_python([os.path.join(SCRIPTS, name), *map(str, args)], **env))


def xla_import_error() -> str:
    """Why the XLA tests cannot run here ('' if torch_xla is installed): looked up, not imported,
    so pytest itself never imports it. A broken install fails these tests rather than skipping
    them; the fallback tests below prove what a user with one sees."""
    import importlib.util
    return "" if importlib.util.find_spec("torch_xla") else "torch_xla is not installed (Linux x86_64 wheels only)"


def probe(device: str, **env: str) -> dict:
    proc = check(run_python(["-m", "core.devices", "--device", device], timeout=180, **env))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def events_of(run_path: str) -> list[dict]:
    with open(os.path.join(run_path, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def status_of(run_path: str) -> dict:
    with open(os.path.join(run_path, "status.json")) as f:
        return json.load(f)


def assert_finite_losses(events: list[dict]) -> None:
    losses = [e[k] for e in events for k in ("loss_d", "loss_g") if k in e]
    assert losses, "no losses were logged"
    assert all(isinstance(v, float) and math.isfinite(v) for v in losses), losses
