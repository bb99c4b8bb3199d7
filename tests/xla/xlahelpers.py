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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "tests", "xla_scripts")
XLA_TIMEOUT = 420   # seconds for one XLA subprocess: generous for a loaded 2-core CI machine


# XLA:CPU compiles each graph through LLVM, whose optimisation of the machine code is most of a tiny
# run's CPU. Level 0 skips it, and the older loop emitters (not the MLIR fusion emitters) lower each
# fusion to LLVM in less time: the same graphs, compiled as often (what the tests count), the same
# results to float rounding, for much less CPU (the figures: bench/README.md, "The suite"). A TPU
# compiles with its own backend either way.
FAST_COMPILE = {"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"}


def xla_env(**extra: str) -> dict:
    """The child's environment: repo importable, XLA on the CPU compiling fast, no inherited XLA knobs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CPU_NUM_DEVICES", "XLA_ALWAYS_ALLREDUCE", "BLINK_DISABLE_XLA", "PJRT_DEVICE", "XLA_FLAGS")}
    env.update({"PYTHONPATH": ROOT, "PJRT_DEVICE": "CPU", **FAST_COMPILE, **extra})
    return env


def run_python(args: list[str], timeout: float = XLA_TIMEOUT, **env: str) -> subprocess.CompletedProcess:
    """`python ARGS` in a fresh interpreter: for what a fresh process imports or reads at import."""
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=xla_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    return proc


def run_xla(args: list[str], timeout: float = XLA_TIMEOUT, **env: str) -> subprocess.CompletedProcess:
    """`python ARGS` on XLA:CPU as a fork of an interpreter that imported torch_xla once
    (tests/clihelpers.py): what every run of the XLA tests but the fresh ones starts as."""
    from tests.clihelpers import run_cli
    return run_cli(args, xla_env(**env), timeout=timeout, xla=True)


def check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def run_script(name: str, *args: str, **env: str) -> None:
    check(run_xla([os.path.join(SCRIPTS, name), *map(str, args)], **env))


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


# ------------------------------------------------------------------------------------------
# One real CLI run per configuration, shared by the tests of a module that read it
# ------------------------------------------------------------------------------------------
# Every graph a run has (first steps, steady step, log step, grid, quality meter, checkpoint, the
# learning-rate decay, the EMA) is met by step 10; steps 10-16 repeat them all.
SHARED_RUN = ("--preset", "fast", "--steps", "16", "--log-every", "2", "--grid-every", "4",
              "--checkpoint-every", "4", "--lr-decay-start", "0.5", "--ema", "0.99", "--seed", "3")
# The quality meter every 4 steps where one device's readings are compared with four's (DCGAN); the
# other types' runs measure at steps 8 and 16, enough to prove its graph compiles once with theirs.
QUALITY_EVERY = {"dcgan": 4, "hinge": 8, "wgan-gp": 8}
# Two critic updates per generator update, not WGAN-GP's five: the graph still loops over critic
# updates with the penalty's double backward, and compiles and runs in two thirds of the time.
CRITIC_UPDATES = {"wgan-gp": ("--n-critic", "2")}
# MNIST is large enough to train without augmentation (core/config.py AUGMENT_BELOW): the hinge
# runs turn it on, so its random shifts and cut-outs are proven to compile once over 4 devices.
AUGMENTED = {"hinge": ("--augment", "on")}
# Adam's betas at 0.3 for these runs: 1 - 0.3**k is 1.0 in float32 from update 15, so steps 10-16
# cross the point where bias corrections kept as Python floats would become graph constants and
# the step compile again (test_xla.py's compile-settle test runs DCGAN's step past it).
CROSSING_ROUNDING = {gan: ("--beta1", "0.3", "--beta2", "0.3") for gan in ("hinge", "wgan-gp")}


def train_watching_states(run: str, flags: list[str], **env: str) -> list[str]:
    """The real CLI trainer into `run`; the states its status went through, as a viewer saw them."""
    from tests.clihelpers import start_cli
    proc = start_cli(["-m", "core.train", *flags, "--run-dir", run], xla_env(**env), xla=True)
    states: list[str] = []
    deadline = time.time() + XLA_TIMEOUT
    try:
        while proc.poll() is None and time.time() < deadline:
            try:
                state = status_of(run).get("state")
            except (OSError, ValueError):
                state = None
            if state and (not states or states[-1] != state):
                states.append(state)
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)
    assert proc.returncode == 0, "".join(proc.output())[-3000:]
    final = status_of(run)["state"]
    return states if states and states[-1] == final else [*states, final]


def cli_runs(tmp_path_factory):
    """The `cli_run` fixture (tests/xla/conftest.py): cli_run(gan, batch, devices, precision) ->
    (run folder, states seen) of one real CLI run on XLA:CPU (SPMD over `devices` devices in one
    process), made once per configuration and shared by the module's tests that read it."""
    runs: dict[tuple, tuple[str, list[str]]] = {}

    def get(gan: str, batch: int, devices: int, precision: str = "fp32") -> tuple[str, list[str]]:
        key = (gan, batch, devices, precision)
        if key not in runs:
            run = str(tmp_path_factory.mktemp(f"{gan}-{devices}dev") / "run")
            flags = ["--device", "xla-cpu", "--gan", gan, "--batch-size", str(batch), "--precision", precision,
                     *SHARED_RUN, "--quality-every", str(QUALITY_EVERY[gan]), *CRITIC_UPDATES.get(gan, ()),
                     *AUGMENTED.get(gan, ()), *CROSSING_ROUNDING.get(gan, ())]
            runs[key] = run, train_watching_states(run, flags, CPU_NUM_DEVICES=str(devices))
        return runs[key]
    return get


def assert_compiles_once_on_four_devices(cli_run, gan: str, batch: int, precision: str) -> None:
    """On 4 XLA:CPU devices (SPMD) steps 10-16 compile nothing new (for hinge and WGAN-GP past the
    update where Adam's bias corrections round to 1.0), no op falls back to the host, and each device
    holds a quarter of the batch, as read from the batch's own sharding."""
    run, _ = cli_run(gan, batch, 4, precision)
    status, events = status_of(run), events_of(run)
    assert status["state"] == "done" and status["device_kind"] == "xla-cpu", status
    assert status["devices"] == 4 and "one process" in status["layout"], status
    assert status["augment"].startswith("on" if gan in AUGMENTED else "off"), status["augment"]
    assert status["diagnostics"]["batch_shards"] == [[batch // 4, 1, 28, 28]] * 4, status["diagnostics"]
    compiles = {e["step"]: e["xla_compiles"] for e in events if "xla_compiles" in e}
    assert compiles[10] > 0 and compiles[16] == compiles[10], compiles
    every = QUALITY_EVERY[gan]
    assert [e["step"] for e in events if "quality_fd" in e] == list(range(every, 17, every))   # the meter ran on XLA
    diag = status["diagnostics"]
    assert diag["fallback_ops"] == [], "ops outside runtime.ALLOWED_FALLBACK_OPS ran on the host"
    # fp32 means fp32 products (a TPU's default is bf16 passes); bf16 runs keep XLA's default.
    assert (diag["matmul_precision"] == "highest") == (precision == "fp32"), diag
    assert_finite_losses(events)
