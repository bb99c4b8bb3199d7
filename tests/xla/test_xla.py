"""The TPU path (PyTorch/XLA) on XLA:CPU, from the CLI: the fallbacks, the precision policy, one real
run per configuration shared by the tests that read it (1 and 4 devices, SPMD), a fault in the
trainer's bookkeeping, and what the probe says of today's TPUs.

CPU_NUM_DEVICES=4 gives four XLA:CPU devices, which the trainer drives with SPMD from one
process: the program a multi-chip TPU runs. Each XLA:CPU compile takes seconds on 2 cores, so
every run is tiny (preset fast at 28x28, batch 8-16, a handful of steps). The fallback tests at
the top need no torch_xla and run everywhere.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from core.rundir import RunDir
from tests.apphelpers import alive
from tests.xla.xlahelpers import (ROOT, SCRIPTS, XLA_TIMEOUT, assert_finite_losses, check, events_of, probe, run_python, run_script,
                                  status_of, xla_env)


# ------------------------------------------------------------------------------------------
# Fallback when torch_xla is missing or broken (no torch_xla needed)
# ------------------------------------------------------------------------------------------
def test_broken_torch_xla_falls_back_with_notice(broken_xla):
    for device in ("xla-cpu", "tpu"):
        info = probe(device, PYTHONPATH=broken_xla)
        assert info["kind"] in ("cpu", "cuda")
        assert "undefined symbol" in info["notice"] or "no TPU" in info["notice"], info
        assert device.split("-")[0].upper() in info["notice"].upper()

def test_disabled_xla_trains_on_cpu_and_says_so(tmp_path):
    run = str(tmp_path / "run")
    check(run_python(["-m", "core.train", "--device", "xla-cpu", "--preset", "fast", "--batch-size", "8",
                 "--steps", "2", "--log-every", "1", "--run-dir", run], timeout=180, BLINK_DISABLE_XLA="1"))
    status = status_of(run)
    assert status["state"] == "done"
    assert status["device_kind"] == "cpu"
    assert "BLINK_DISABLE_XLA" in status["notice"], "the user must see why XLA was not used"


def test_auto_probe_does_not_import_torch_xla_without_a_tpu():
    # The UI probes in a child; on a machine with no TPU even that child must not pay the
    # torch_xla import (seconds) nor touch the XLA runtime. PJRT_DEVICE=CPU (xla_env's, named here)
    # keeps a TPU host's chips out of the probe too, refused by name before any import, so both
    # assertions hold on every host: the chips on PCI decide nothing here.
    code = ("import json, sys; from core import devices; i = devices.probe('auto'); "
            "print(json.dumps([i.kind, 'torch_xla' in sys.modules]))")
    kind, imported = json.loads(check(run_python(["-c", code], timeout=120, PJRT_DEVICE="CPU"))
                                .stdout.strip().splitlines()[-1])
    assert kind in ("cpu", "cuda")
    assert not imported, "probing 'auto' without a usable TPU imported torch_xla"


def test_bf16_refused_on_a_cpu_without_native_bf16(tmp_path):
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    run = str(tmp_path / "run")
    proc = run_python(["-m", "core.train", "--device", "cpu", "--precision", "bf16", "--preset", "fast",
                 "--batch-size", "8", "--steps", "1", "--run-dir", run], timeout=180)
    status = status_of(run)
    if native:
        assert proc.returncode == 0 and status["state"] == "done"
    else:
        assert proc.returncode != 0 and status["state"] == "failed"
        assert "bf16" in status["message"] and "native bfloat16" in status["message"]


# ------------------------------------------------------------------------------------------
# Precision policy on XLA
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
def test_fp16_refused_on_xla_with_the_reason(tmp_path):
    run = str(tmp_path / "run")
    proc = run_python(["-m", "core.train", "--device", "xla-cpu", "--precision", "fp16", "--steps", "1",
                 "--run-dir", run], timeout=180)
    status = status_of(run)
    assert proc.returncode != 0 and status["state"] == "failed"
    assert "fp16" in status["message"] and "bfloat16" in status["message"], status["message"]


@pytest.fixture(scope="module")
def autocast_dtypes(tmp_path_factory) -> dict:
    out = str(tmp_path_factory.mktemp("autocast") / "dtypes.json")
    run_script("autocast_policy.py", out)
    with open(out) as f:
        return json.load(f)


@pytest.mark.xla
@pytest.mark.parametrize("gan", ["dcgan", "wgan-gp", "hinge"])
def test_autocast_bf16_policy_on_xla(autocast_dtypes, gan):
    """Convolutions in bf16; normalisation, generator output and every loss in fp32."""
    assert autocast_dtypes["kind"] == "xla-cpu"
    layers, values = autocast_dtypes["layers"][gan], autocast_dtypes["losses"][gan]
    convs = {k: v for k, v in layers.items() if "Conv" in k}
    norms = {k: v for k, v in layers.items() if "Norm" in k}
    assert convs and all(v == ["bfloat16"] for v in convs.values()), layers
    assert norms and all(v == ["float32"] for v in norms.values()), layers
    assert values["bn_running_mean"] == ["torch.float32"]
    assert all(v == "torch.float32" for k, v in values.items() if k != "bn_running_mean"), values


# ------------------------------------------------------------------------------------------
# The real trainer on XLA:CPU
# ------------------------------------------------------------------------------------------
# Every graph a run has (first steps, steady step, log step, grid, quality meter, checkpoint, the
# learning-rate decay, the EMA) is met by step 10; steps 10-16 repeat them all.
SHARED_RUN = ("--preset", "fast", "--steps", "16", "--log-every", "2", "--grid-every", "4", "--quality-every", "4",
              "--checkpoint-every", "4", "--lr-decay-start", "0.5", "--ema", "0.99", "--seed", "3")
# Two critic updates per generator update, not WGAN-GP's five: the graph still loops over critic
# updates with the penalty's double backward, and compiles and runs in two thirds of the time.
CRITIC_UPDATES = {"wgan-gp": ("--n-critic", "2")}
# MNIST is large enough to train without augmentation (core/config.py AUGMENT_BELOW): the hinge
# runs turn it on, so its random shifts and cut-outs are proven to compile once over 4 devices.
AUGMENTED = {"hinge": ("--augment", "on")}
# Adam's betas at 0.3 for these runs: 1 - 0.3**k is 1.0 in float32 from update 15, so steps 10-16
# cross the point where bias corrections kept as Python floats would become graph constants and
# the step compile again (see the compile-settle test below, which runs the other types' steps).
CROSSING_ROUNDING = {gan: ("--beta1", "0.3", "--beta2", "0.3") for gan in ("hinge", "wgan-gp")}


def _train_watching_states(run: str, flags: list[str], **env: str) -> list[str]:
    """The real CLI trainer into `run`; the states its status went through, as a viewer saw them."""
    proc = subprocess.Popen([sys.executable, "-m", "core.train", *flags, "--run-dir", run], cwd=ROOT, env=xla_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        output = proc.communicate()[0]
    assert proc.returncode == 0, output[-3000:]
    final = status_of(run)["state"]
    return states if states and states[-1] == final else [*states, final]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """cli_run(gan, batch, devices, precision) -> (run folder, states seen) of one real CLI run on
    XLA:CPU (SPMD over `devices` devices in one process), made once per configuration and shared
    by the tests that read it."""
    runs: dict[tuple, tuple[str, list[str]]] = {}

    def get(gan: str, batch: int, devices: int, precision: str = "fp32") -> tuple[str, list[str]]:
        key = (gan, batch, devices, precision)
        if key not in runs:
            run = str(tmp_path_factory.mktemp(f"{gan}-{devices}dev") / "run")
            flags = ["--device", "xla-cpu", "--gan", gan, "--batch-size", str(batch), "--precision", precision,
                     *SHARED_RUN, *CRITIC_UPDATES.get(gan, ()), *AUGMENTED.get(gan, ()), *CROSSING_ROUNDING.get(gan, ())]
            runs[key] = run, _train_watching_states(run, flags, CPU_NUM_DEVICES=str(devices))
        return runs[key]
    return get


@pytest.mark.xla
def test_cli_training_on_one_xla_device_end_to_end(cli_run):
    """One XLA device (Colab's v5e-1: no mesh) through the CLI the app runs: compiling -> running
    -> done, the speed and diagnostics a viewer reads, finite losses and PNG grids."""
    run, states = cli_run("dcgan", 16, 1)
    status = status_of(run)
    # 'compiling' is shown while XLA builds the first graphs, then the run says 'running'.
    assert states[0] == "compiling" and states[-1] == "done", states
    assert "running" in states and states.index("running") > states.index("compiling"), states
    # A graph first met after the first steps (the quality meter's at step 4) compiles: said then too.
    assert "compiling" in states[states.index("running"):], states
    assert status["device_kind"] == "xla-cpu" and status["device"] == "XLA:CPU (1 device)", status["device"]
    assert status["devices"] == 1 and status["diagnostics"]["batch_shards"] == [[16, 1, 28, 28]]   # no mesh
    diag = status["diagnostics"]
    assert isinstance(diag["compiles"], int) and diag["compiles"] > 0
    assert diag["fallback_ops"] == [], "ops outside devices.ALLOWED_FALLBACK_OPS ran on the host"
    assert diag["first_step_seconds"] and diag["first_step_seconds"] > 0
    assert "memory_used" not in diag     # XLA:CPU cannot report memory: polled, guarded, left out
    assert status["steps_per_second"] and status["steps_per_second"] > 0
    events = events_of(run)
    assert events[-1]["step"] == 16
    assert_finite_losses(events)
    grids = RunDir(run).grids()
    assert grids
    with open(grids[-1][1], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # D's verdicts on each grid, computed on the device too.
    for step, _ in grids:
        verdicts = RunDir(run).read_verdicts(step)
        assert all(math.isfinite(v) for v in verdicts["fake"] + verdicts["real"]) and len(verdicts["real"]) == 60


@pytest.mark.xla
@pytest.mark.parametrize("gan, batch, precision", [
    ("dcgan", 16, "fp32"),
    ("hinge", 16, "bf16"),   # spectral norm (torch.vdot is not lowered by XLA) in a TPU's default precision
    # Critic updates (gradient penalty: double backward) and a generator update in one graph.
    pytest.param("wgan-gp", 8, "fp32", marks=pytest.mark.slow),
])
def test_real_trainer_on_four_devices_compiles_once_and_never_falls_back(cli_run, gan, batch, precision):
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
    assert [e["step"] for e in events if "quality_fd" in e] == [4, 8, 12, 16]   # the meter ran on XLA
    diag = status["diagnostics"]
    assert diag["fallback_ops"] == [], "ops outside devices.ALLOWED_FALLBACK_OPS ran on the host"
    # fp32 means fp32 products (a TPU's default is bf16 passes); bf16 runs keep XLA's default.
    assert (diag["matmul_precision"] == "highest") == (precision == "fp32"), diag
    assert_finite_losses(events)


# Adam's bias corrections as Python floats became graph constants once they rounded to 1.0 (torch_xla's
# special scalars), and the step compiled again mid-run: at betas 0.3, from update 15. On the device
# (capturable) they never change the graph. DCGAN's step alone here; hinge (in bf16, a TPU's default)
# and WGAN-GP cross the same point in their 4-device trainer runs above.
@pytest.mark.xla
@pytest.mark.parametrize("gan, preset, precision", [("dcgan", "fast", "fp32")])
def test_compiles_stop_after_warm_up_past_the_steps_where_adams_corrections_round_to_one(tmp_path, gan, preset,
                                                                                         precision):
    out = tmp_path / "compiles.json"
    run_script("compiles_settle.py", out, gan, preset, precision, 16)
    with open(out) as f:
        compiles = json.load(f)["compiles"]
    # Steps 1 and 2 are different graphs (the optimizers create their state in step 1); then none.
    assert len(compiles) == 16 and compiles[-1] == compiles[2], compiles


# Four devices sum a batch's gradients in another order than one device: the float results differ
# in their last bits, and a GAN at the fast preset's lr 3e-3 amplifies that, about tenfold every
# three steps (measured: 0 at steps 1-2, 6e-4 at step 4, 5e-3 to 1.2e-2 at step 6, 0.2 by step 14).
# So the first steps must agree to the logged digits (a per-device BatchNorm or a repeated batch
# is off by far more at step 1), steps 3-4 within 1%, and the quality meter's readings within 1%
# over the whole run.
def loss_match_tolerance(step: int) -> float:
    return 1e-4 if step <= 2 else 1e-2 if step <= 4 else math.inf


@pytest.mark.xla
def test_four_devices_train_what_one_device_trains_on_the_same_global_batch(cli_run):
    """The same global batch of 16 and seed on 4 devices and on 1: the logged losses and D outputs
    agree (so the batch is split, not repeated, and BatchNorm sees the global batch of 16, not
    each device's 4), and so do the quality meter's readings over the whole run."""
    (one_run, _), (four_run, _) = cli_run("dcgan", 16, 1), cli_run("dcgan", 16, 4)
    one, four = events_of(one_run), events_of(four_run)
    logged = [(a, b) for a, b in zip(one, four) if "loss_d" in a]
    assert [a["step"] for a, _ in logged] == [b["step"] for _, b in logged] == [1, *range(2, 17, 2)]
    far = [(a["step"], k, a[k], b[k]) for a, b in logged for k in ("loss_d", "loss_g", "d_real", "d_fake")
           if abs(a[k] - b[k]) > loss_match_tolerance(a["step"]) * max(1.0, abs(a[k]))]
    assert not far, far
    quality = [(a["quality_fd"], b["quality_fd"]) for a, b in zip(one, four) if "quality_fd" in a]
    assert len(quality) == 4 and all(abs(a - b) <= 1e-2 * a for a, b in quality), quality


@pytest.mark.xla
def test_a_four_device_checkpoint_loads_and_samples_without_torch_xla(cli_run, broken_xla, tmp_path):
    """Replicated weights come to the host whole: the run's checkpoint and generator load and
    sample where torch_xla cannot even be imported."""
    run, _ = cli_run("dcgan", 16, 4)
    out = check(run_python([os.path.join(SCRIPTS, "load_without_xla.py"), run], timeout=180, PYTHONPATH=broken_xla)).stdout.split()
    assert out == ["16", "16"]
    npy = str(tmp_path / "samples.npy")
    check(run_python(["-m", "core.sample", "--run", run, "--n", "4", "--out", npy], timeout=180, PYTHONPATH=broken_xla))
    assert os.path.getsize(npy) > 0


@pytest.mark.xla
def test_a_failure_in_the_trainers_bookkeeping_ends_the_run_with_its_checkpoint(tmp_path):
    """Saving the grid raises from step 4 (a fault injected by the test script): the run ends
    `failed` there, saying what it was doing, with the checkpoint of step 2 kept. One XLA device:
    the Loop's bookkeeping is the same over four, whose runs the tests above read."""
    run = str(tmp_path / "run")
    proc = run_python([os.path.join(SCRIPTS, "grid_failure.py"), "--device", "xla-cpu", "--preset", "fast",
                 "--batch-size", "16", "--steps", "300", "--log-every", "3", "--grid-every", "2",
                 "--checkpoint-every", "2", "--quality-every", "0", "--run-dir", run], CPU_NUM_DEVICES="1")
    status = status_of(run)
    assert proc.returncode == 1 and status["state"] == "failed", (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "while saving the sample grid at step 4" in status["message"], status["message"]
    assert "simulated fault" in status["message"] and "checkpoint (step 2) is kept" in status["message"]
    assert status["saved_step"] == 2
    assert os.path.exists(os.path.join(run, "checkpoint.pt"))
    assert "saving the sample grid" in open(os.path.join(run, "error.log")).read()
    assert not alive(status["pid"])


# ------------------------------------------------------------------------------------------
# The probe tells the truth about a TPU (sysfs chips monkeypatched; torch_xla never imported)
# ------------------------------------------------------------------------------------------
@pytest.fixture
def tpu_host(monkeypatch):
    """A host whose PCI bus shows TPU chips: the chip ids are the only thing faked."""
    from core import devices

    def make(pci_ids: list[str], libtpu: bool, accelerator_type: str = ""):
        monkeypatch.setattr(devices, "tpu_pci_ids", lambda: list(pci_ids))
        monkeypatch.setattr(devices, "libtpu_found", lambda: libtpu)
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
        monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")    # no metadata server here: never ask one
        if accelerator_type:
            monkeypatch.setenv("TPU_ACCELERATOR_TYPE", accelerator_type)
        else:
            monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
        return devices
    return make


def test_probe_does_not_claim_a_tpu_without_libtpu(tpu_host):
    devices = tpu_host(["0x0063"] * 8, libtpu=False)
    info = devices.probe("auto")
    assert info.kind != "tpu", info
    assert "Found 8 TPU chip" in info.notice and "libtpu is not installed" in info.notice
    assert "torch_xla[tpu]" in info.notice
    assert devices.probe("tpu").kind != "tpu"
    assert "torch_xla" not in sys.modules     # refused before any import of torch_xla


def test_probe_does_not_claim_a_tpu_when_pjrt_device_says_cpu(tpu_host, monkeypatch):
    devices = tpu_host(["0x0063"] * 8, libtpu=True)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    info = devices.probe("auto")
    assert info.kind != "tpu" and "PJRT_DEVICE=CPU" in info.notice, info


@pytest.mark.parametrize("pci_ids, accelerator_type, name, count", [
    (["0x0063"], "v5litepod-1", "TPU v5e (1 chip)", 1),                    # Colab's free TPU: no mesh
    (["0x0063"] * 8, "v5litepod-8", "TPU v5e (8 chips)", 8),               # Kaggle v5e-8
    (["0x006f"] * 8, "", "TPU v6e (8 chips)", 8),                          # Kaggle v6e-8, from PCI alone
    (["0x0027"] * 4, "v3-8", "TPU v3 (4 chips, 2 cores each)", 8),         # v3-8: 8 devices on 4 chips
])
def test_todays_tpus_by_name(tpu_host, monkeypatch, pci_ids, accelerator_type, name, count):
    devices = tpu_host(pci_ids, libtpu=True, accelerator_type=accelerator_type)
    monkeypatch.setattr(devices, "xla_import_error", lambda: "")   # torch_xla imports (not imported here)
    info = devices.probe("auto")
    assert (info.kind, info.name, info.devices) == ("tpu", name, count)
    assert ("SPMD" in info.layout) == (count > 1), info.layout
    assert devices.default_precision(info.kind) == "bf16"
    assert "fp16" in info.precision_refused and "highest" in info.precision_warned["fp32"]


def test_xla_cpu_on_a_tpu_host_means_the_cpu(monkeypatch):
    from core import devices
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    devices.prepare_environment("xla-cpu")
    assert os.environ["PJRT_DEVICE"] == "CPU" and devices.xla_cpu_device_count() == 4
