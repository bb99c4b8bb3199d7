"""The notebook setup's decision (no network: versions are given), the doctor's version lines, and the
device probe that must not hang the page (a stand-in child process, no torch_xla imported)."""
import multiprocessing
import os
import re
import sys
import time

from core import devices, doctor
from tools import notebook_setup
from core.versions import mismatches
from tools.notebook_setup import decide

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def torch_family_pins() -> list[str]:
    """requirements.txt's torch, torchvision and torch_xla lines, markers left out (read here, apart
    from the code under test)."""
    lines = [line.strip() for line in open(os.path.join(ROOT, "requirements.txt"))]
    pins = [line.split(";")[0].strip() for line in lines if re.match(r"(torch|torchvision|torch_xla)\b", line)]
    assert len(pins) == 3, pins
    return pins


def version_of(pins: list[str], name: str) -> str:
    return next(pin.split("==")[1] for pin in pins if re.match(rf"{name}(\[|==)", pin))


def test_kaggle_keeps_its_matched_torch_torch_xla_and_torchvision():
    plan = decide((3, 12), {"torch": "2.8.0", "torch_xla": "2.8.0", "torchvision": "0.23.0", "libtpu": "0.0.17"})
    assert plan.summary.startswith("keep the installed torch 2.8.0 + torch_xla 2.8.0"), plan.summary
    # What is kept is pinned, so the app's other packages cannot pull another torch in.
    assert plan.install == ["torch==2.8.0", "torch_xla==2.8.0", "torchvision==0.23.0"]
    assert plan.tpu and "\n" not in plan.summary


def test_a_kept_torch_gets_the_torchvision_built_for_it():
    plan = decide((3, 12), {"torch": "2.8.0+cpu", "torch_xla": "2.8.0", "torchvision": "0.24.1"})
    assert plan.summary.startswith("keep the installed torch 2.8.0+cpu + torch_xla 2.8.0"), plan.summary
    assert plan.install == ["torch==2.8.0+cpu", "torch_xla==2.8.0", "torchvision==0.23.*"]


def test_python_313_without_torch_xla_gets_the_29_pair_with_the_libtpu_that_has_a_313_wheel():
    plan = decide((3, 13), {"torch": "2.10.0", "torchvision": "0.25.0"})
    assert plan.install == ["torch==2.9.1", "torchvision==0.24.1", "torch_xla==2.9.0", "libtpu==0.0.21.1", "tpu-info"]
    assert plan.tpu
    assert "no torch_xla installed" in plan.summary and "0.0.21.1 has" in plan.summary, plan.summary


def test_colabs_313_tpu_image_keeps_its_29_pair():
    """Colab's TPU runtime ships torch 2.9.0 + torch_xla 2.9.0 on Python 3.13 (with libtpu 0.0.21.1)."""
    plan = decide((3, 13), {"torch": "2.9.0", "torch_xla": "2.9.0", "torchvision": "0.24.0"})
    assert plan.install == ["torch==2.9.0", "torch_xla==2.9.0", "torchvision==0.24.0"] and plan.tpu
    assert plan.summary.startswith("keep the installed torch 2.9.0 + torch_xla 2.9.0"), plan.summary


def test_a_mismatched_pair_is_replaced_by_one_that_matches():
    installed = {"torch": "2.9.1", "torch_xla": "2.8.0", "torchvision": "0.24.1"}
    assert mismatches(installed)
    plan = decide((3, 12), installed)
    assert "torch 2.9.1 does not match torch_xla 2.8.0" in plan.summary, plan.summary
    assert plan.install == torch_family_pins()
    after = {"torch": version_of(plan.install, "torch"), "torch_xla": version_of(plan.install, "torch_xla"),
             "torchvision": version_of(plan.install, "torchvision")}
    assert mismatches(after) == [], after


def test_nothing_installed_on_311_or_312_installs_the_requirements_pins():
    for python in ((3, 11), (3, 12)):
        plan = decide(python, {})
        assert plan.install == torch_family_pins(), (python, plan)
        assert plan.tpu and "no torch_xla installed" in plan.summary


def test_an_old_torch_xla_is_replaced():
    plan = decide((3, 12), {"torch": "2.7.1", "torch_xla": "2.7.0", "torchvision": "0.22.1"})
    assert "torch_xla 2.7.0 is older than 2.8" in plan.summary and plan.install == torch_family_pins()


def test_a_python_without_torch_xla_wheels_says_the_tpu_cannot_be_used():
    plan = decide((3, 14), {})
    assert not plan.tpu
    assert plan.summary.startswith("no torch_xla wheel for Python 3.14: the TPU cannot be used, Blink runs on the CPU")
    assert not any("torch_xla" in pin for pin in plan.install) and plan.install == torch_family_pins()[:2]


def test_main_prints_one_line_and_installs_the_rest_without_the_torch_family(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(notebook_setup, "installed_versions",
                        lambda: {"torch": "2.8.0", "torch_xla": "2.8.0", "torchvision": "0.23.0", "libtpu": None})
    monkeypatch.setattr(notebook_setup.subprocess, "run",
                        lambda cmd: calls.append(cmd) or notebook_setup.subprocess.CompletedProcess(cmd, 0))
    assert notebook_setup.main() == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("Blink setup: keep the installed torch 2.8.0 + torch_xla 2.8.0"), printed
    (cmd,) = calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    torch_args = [arg for arg in cmd if re.match(r"torch", arg)]
    assert torch_args == ["torch==2.8.0", "torch_xla==2.8.0", "torchvision==0.23.0"], cmd
    assert "gradio==6.31.0" in cmd and not any(arg.startswith("#") for arg in cmd)


def test_the_doctor_reports_versions_and_a_mismatch_in_words(monkeypatch):
    monkeypatch.setattr(doctor.versions, "installed_versions",
                        lambda: {"torch": "2.9.1", "torchvision": "0.24.1", "torch_xla": "2.8.0", "libtpu": None})
    _, lines = doctor.describe("cpu")
    assert lines[0] == (f"Python {sys.version.split()[0]}, torch 2.9.1, torchvision 0.24.1, torch_xla 2.8.0, "
                        "libtpu not installed"), lines[0]
    (mismatch,) = [line for line in lines if line.startswith("MISMATCH")]
    assert "torch 2.9.1 and torch_xla 2.8.0 do not match" in mismatch
    assert "python tools/notebook_setup.py" in mismatch


# The probe's child is forked here, so the probe it runs is the one this test replaced (the app's
# children are forks of its fork server, which runs the real one).
FORKED = multiprocessing.get_context("fork")


def test_a_probe_that_hangs_times_out_with_a_reason_and_assumes_the_cpu(monkeypatch):
    monkeypatch.setattr(devices, "probe", lambda requested: time.sleep(60))
    started = time.monotonic()
    info = devices.probe_in_child_process("auto", FORKED, timeout=0.5)
    assert time.monotonic() - started < 30
    assert info.kind == "cpu", info
    assert info.notice.startswith("the TPU runtime did not answer within 0.5 s: "), info.notice
    assert "assuming CPU" in info.notice


def test_a_probe_that_crashes_says_how_and_assumes_the_cpu(monkeypatch):
    monkeypatch.setattr(devices, "probe", lambda requested: os._exit(3))
    info = devices.probe_in_child_process("auto", FORKED, timeout=60)
    assert info.kind == "cpu" and info.notice == ("device probe failed (the probe process ended with exit code 3); "
                                                  "assuming CPU."), info.notice


def _probe_sees_skip_variable(monkeypatch, pci_ids: list[str]) -> str:
    """What the probe's child process finds in TPU_SKIP_MDS_QUERY (a stand-in probe reports it)."""
    monkeypatch.delenv("TPU_SKIP_MDS_QUERY", raising=False)
    monkeypatch.setattr(devices, "tpu_pci_ids", lambda: list(pci_ids))
    monkeypatch.setattr(devices, "probe", lambda requested: devices.DeviceInfo(
        kind="cpu", name=os.environ.get("TPU_SKIP_MDS_QUERY", "unset")))
    return devices.probe_in_child_process("auto", FORKED, timeout=60).name


def test_the_probe_skips_the_metadata_server_when_no_tpu_chip_is_on_pci(monkeypatch):
    assert _probe_sees_skip_variable(monkeypatch, []) == "1"
    assert "TPU_SKIP_MDS_QUERY" not in os.environ    # the caller's own environment is left as it was


def test_the_probe_leaves_the_metadata_query_alone_on_a_tpu_host(monkeypatch):
    assert _probe_sees_skip_variable(monkeypatch, ["0x0063"] * 8) == "unset"
