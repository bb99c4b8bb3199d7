"""The TPU path from the CLI on XLA:CPU, the parts that need no shared run: the fallbacks when
torch_xla is missing or disabled, the precision refusals, a fault in the trainer's bookkeeping, the
doctor, the CLI interrupted by Ctrl-C or SIGTERM, and what the probe says of today's TPUs. (The
shared runs on 1 and 4 devices are tests/xla/test_xla.py's; the app's, test_xla_app.py's.)
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests.apphelpers import alive
from tests.clihelpers import run_cli, start_cli
from tests.xla.xlahelpers import SCRIPTS, XLA_TIMEOUT, check, probe, run_python, run_xla, status_of, xla_env

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
    check(run_cli(["-m", "core.train", "--device", "xla-cpu", "--preset", "fast", "--batch-size", "8",
                   "--steps", "2", "--log-every", "1", "--run-dir", run], xla_env(BLINK_DISABLE_XLA="1"), timeout=180))
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
    proc = run_cli(["-m", "core.train", "--device", "cpu", "--precision", "bf16", "--preset", "fast",
                    "--batch-size", "8", "--steps", "1", "--run-dir", run], xla_env(), timeout=180)
    if native:
        assert proc.returncode == 0 and status_of(run)["state"] == "done"
    else:   # refused by the plan, before any run directory or trainer
        assert proc.returncode == 2 and not os.path.exists(run), proc.stderr
        assert "bf16" in proc.stderr and "native bfloat16" in proc.stderr


def test_a_precision_the_device_refuses_fails_the_cli_run_with_the_reason(tmp_path):
    """fp16 is refused on every CPU: the CLI refuses it at once, saying why (XLA's own reason: the doctor's test)."""
    run = str(tmp_path / "run")
    proc = run_cli(["-m", "core.train", "--device", "cpu", "--precision", "fp16", "--steps", "1",
                    "--run-dir", run], xla_env(), timeout=180)
    assert proc.returncode == 2 and not os.path.exists(run)
    assert proc.stderr.strip().startswith("error: Precision fp16 is not offered on CPU"), proc.stderr
    assert "CPUs have no fast fp16 path" in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------
# The trainer's bookkeeping failing on XLA
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
def test_a_failure_in_the_trainers_bookkeeping_ends_the_run_with_its_checkpoint(tmp_path):
    """Saving the grid raises from step 4 (a fault injected by the test script): the run ends
    `failed` there, saying what it was doing, with the checkpoint of step 2 kept. One XLA device:
    the Loop's bookkeeping is the same over four, whose runs the tests above read."""
    run = str(tmp_path / "run")
    proc = run_xla([os.path.join(SCRIPTS, "grid_failure.py"), "--device", "xla-cpu", "--preset", "fast",
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
# The doctor
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
def test_doctor_reports_four_devices_in_one_process_and_a_real_run():
    proc = check(run_xla(["-m", "core.doctor", "--device", "xla-cpu", "--steps", "15", "--batch-size", "16"],
                         CPU_NUM_DEVICES="4"))
    out = proc.stdout
    assert "Device: XLA:CPU (4 devices)" in out and "4 devices in one process" in out, out
    assert "4 per device on 4 devices" in out and "4x1x28x28" in out, out
    assert "Short run: done after 15 of 15 steps" in out and "stopped growing" in out, out
    assert "ops run on the host: none" in out and "img/s" in out, out
    # The precision XLA refuses, and why, from the device layer the trainer's config check reads
    # (the CLI's road for a refused precision: test_bf16_refused_on_a_cpu_without_native_bf16).
    assert "fp16 is not offered here: XLA devices compute in bfloat16, not float16" in out, out


def test_doctor_on_the_cpu():
    proc = check(run_cli(["-m", "core.doctor", "--device", "cpu", "--steps", "10"], xla_env(), timeout=180))
    assert "Device: CPU" in proc.stdout and "in the trainer process" in proc.stdout
    assert "Short run: done after 10 of 10 steps" in proc.stdout and "OK:" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------------------
# The CLI keeps what it trained when interrupted (Ctrl-C reaches the terminal's process group)
# ------------------------------------------------------------------------------------------
def _interrupt_cli(tmp_path, device: str, sig: int, **env: str) -> tuple[int, dict, str]:
    import signal
    run = str(tmp_path / "run")
    args = ["-m", "core.train", "--device", device, "--preset", "fast", "--batch-size", "16", "--steps", "100000",
            "--log-every", "5", "--run-dir", run]
    proc = start_cli(args, xla_env(**env), new_session=True, xla=device != "cpu")
    try:
        deadline = time.time() + XLA_TIMEOUT
        while time.time() < deadline and proc.poll() is None:
            try:
                if status_of(run).get("state") == "running" and status_of(run).get("step", 0) >= 10:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)     # as a terminal's Ctrl-C does: the whole foreground group
        else:
            proc.send_signal(sig)        # as `kill` or a supervisor does: the process alone
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, status_of(run), "".join(proc.output())


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_cli_interrupted_stops_with_a_checkpoint(tmp_path, signal_name):
    import signal
    code, status, output = _interrupt_cli(tmp_path, "cpu", getattr(signal, signal_name))
    assert code == 0 and status["state"] == "stopped", (status, output[-2000:])
    assert status["saved_step"] == status["step"] >= 10
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt") and os.path.exists(tmp_path / "run" / "generator.json")


@pytest.mark.xla
def test_cli_ctrl_c_on_four_devices_stops_with_a_checkpoint(tmp_path):
    import signal
    code, status, output = _interrupt_cli(tmp_path, "xla-cpu", signal.SIGINT, CPU_NUM_DEVICES="4")
    assert code == 0 and status["state"] == "stopped" and status["devices"] == 4, (status, output[-2000:])
    assert not alive(status["pid"])
    assert status["saved_step"] == status["step"] >= 10
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt")


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
