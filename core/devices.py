"""The device layer: everything that differs between TPU (PyTorch/XLA), CUDA and CPU. This module and
core/runtime.py alone import torch_xla, inside functions only: importing them starts nothing, and a
missing or broken torch_xla (no wheel for the platform, a torch it was not built for) is a notice and a
fallback, never a crash. `probe(requested)` says what a device can do (kind, name, devices, which
precisions it runs well and why not); the UI asks it through `probe_in_child_process`, so that its own
process never imports torch_xla nor touches an accelerator. `Runtime` (core/runtime.py) is what the
trainer holds inside its process."""
from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any


KINDS = ("tpu", "xla-cpu", "cuda", "cpu")
# The kinds that train on this machine's own CPU: on ZeroGPU no GPU call is asked for them.
CPU_KINDS = ("xla-cpu", "cpu")
XLA_KINDS = ("tpu", "xla-cpu")   # one process drives every device (SPMD), through torch_xla
DDP_KINDS = ("cuda", "cpu")      # several processes (torchrun's ranks) may train one run


# What a kind of device is, asked by name (a status's device_kind, a requested device; a DeviceInfo
# answers is_xla and is_cuda itself): outside the device layer and the plan no code names a kind.
def is_xla(kind: str) -> bool:
    return kind in XLA_KINDS


def is_tpu(kind: str) -> bool:
    return kind == "tpu"


def is_cuda(kind: str) -> bool:
    return kind == "cuda"


def is_cpu(kind: str) -> bool:   # the plain CPU, not XLA:CPU
    return kind == "cpu"


def ddp_backend(kind: str) -> str:
    """The collectives' backend of a run of several processes on this kind."""
    return "nccl" if is_cuda(kind) else "gloo"


@dataclass
class DeviceInfo:
    """What a device can do, in plain values the UI can show and the config can check."""
    kind: str                                   # tpu | xla-cpu | cuda | cpu
    name: str                                   # e.g. "TPU v3 (8 cores)", "NVIDIA H200", "CPU (2 cores)"
    devices: int = 1                            # devices the one trainer process drives (SPMD when > 1)
    precision_refused: dict[str, str] = field(default_factory=dict)   # precision -> reason
    precision_warned: dict[str, str] = field(default_factory=dict)    # precision -> caveat
    notice: str = ""                            # e.g. why a requested device fell back
    processes: int = 1                          # trainer processes torchrun started, a device each (DDP when > 1)
    backend: str = ""                           # their collectives' backend (gloo, nccl) when processes > 1
    available: int = 1                          # processes a run may have here (DDP): the GPUs on CUDA, the cores on a CPU

    @property
    def is_xla(self) -> bool:
        return is_xla(self.kind)

    @property
    def is_cuda(self) -> bool:
        return is_cuda(self.kind)

    @property
    def shards(self) -> int:
        """How many ways each batch is split: over the devices (SPMD) or the processes (DDP)."""
        return self.devices * self.processes

    @property
    def layout(self) -> str:
        """How the trainer uses the devices, in words for the status line and the doctor."""
        if self.processes > 1:
            return f"{self.processes} {'GPUs' if self.is_cuda else 'processes'} (DDP, {self.backend})"
        if self.devices > 1:
            return f"{self.devices} devices in one process (SPMD: each batch split {self.devices} ways)"
        return "1 device, one process"

    @property
    def shard_name(self) -> str:
        """What takes one piece of a batch: under DDP a GPU (a process each) or a process, else a device."""
        return ("GPU" if self.is_cuda else "process") if self.processes > 1 else "device"

    def batch_layout(self, batch_size: int) -> str:
        """The layout with the batch's split, e.g. "2 GPUs (DDP, nccl), batch 128 = 64 per GPU"."""
        if self.processes > 1:
            return f"{self.layout}, batch {batch_size} = {batch_size // self.shards} per {self.shard_name}"
        return self.layout

    def in_processes(self, count: int) -> "DeviceInfo":
        """This device as `count` trainer processes use it (DDP: NCCL on CUDA GPUs, else gloo)."""
        return replace(self, processes=count, backend=ddp_backend(self.kind))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def xla_import_error() -> str:
    """'' if torch_xla imports, else a short reason. Disabled with BLINK_DISABLE_XLA=1."""
    if os.environ.get("BLINK_DISABLE_XLA") == "1":
        return "torch_xla disabled by BLINK_DISABLE_XLA=1"
    skip_metadata_query(os.environ)
    try:
        import torch_xla  # noqa: F401  (the one guarded import point)
    except Exception as exc:  # ImportError, or an undefined symbol from a torch mismatch
        return f"torch_xla unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    return ""


# Google's TPU chips on PCI, by device id: the list torch_xla itself counts launch processes
# from (torch_xla/_internal/tpu.py, _TPU_PCI_DEVICE_IDS), with each id's generation.
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_GENERATIONS = {"0x0027": "v2/v3", "0x005e": "v4", "0x0063": "v5e", "0x006f": "v6e", "0x0076": "7x"}
METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type"


def tpu_pci_ids() -> list[str]:
    """PCI device ids of the TPU chips on this host (one per chip), read from sysfs as torch_xla does:
    a CPU or GPU machine never pays the torch_xla import."""
    import glob
    ids = []
    for vendor_file in sorted(glob.glob("/sys/bus/pci/devices/*/vendor")):
        try:
            if open(vendor_file).read().strip() != GOOGLE_PCI_VENDOR:
                continue
            device_id = open(os.path.join(os.path.dirname(vendor_file), "device")).read().strip()
        except OSError:
            continue
        if device_id in TPU_PCI_GENERATIONS:
            ids.append(device_id)
    return ids


def skip_metadata_query(env) -> None:
    """Set TPU_SKIP_MDS_QUERY=1 in env when no TPU chip is on PCI: unless it is set, torch_xla
    (_internal/tpu.py) asks the GCE metadata server for the TPU type with no timeout, which off a
    TPU VM could hang whoever imports torch_xla. On a TPU host that is how it learns the generation."""
    if not tpu_pci_ids():
        env.setdefault("TPU_SKIP_MDS_QUERY", "1")


def libtpu_found() -> bool:
    """Whether torch_xla will find libtpu, by its rules (torch_xla/__init__.py, _setup_tpu_vm_library_path)
    without importing it: TPU_LIBRARY_PATH, torch_xla/lib/libtpu.so, or the `torch_xla[tpu]` extra's libtpu."""
    import importlib.util
    if os.environ.get("TPU_LIBRARY_PATH"):
        return True
    spec = importlib.util.find_spec("torch_xla")
    if spec and spec.origin and os.path.isfile(os.path.join(os.path.dirname(spec.origin), "lib", "libtpu.so")):
        return True
    return importlib.util.find_spec("libtpu") is not None


def _tpu_refusal() -> str:
    """Why torch_xla would not run on the TPU chips that are present ('' if it will)."""
    pjrt = os.environ.get("PJRT_DEVICE", "")
    if pjrt and pjrt.upper() != "TPU":
        return (f"PJRT_DEVICE={pjrt} is set, so torch_xla would run on {pjrt}, not the TPU "
                "(unset it, or set PJRT_DEVICE=TPU)")
    if not libtpu_found():
        import importlib.metadata   # the libtpu a torch_xla wants comes with its own [tpu] extra
        try:
            version = importlib.metadata.version("torch_xla")
        except importlib.metadata.PackageNotFoundError:
            version = "2.9.0"
        return ("libtpu is not installed, so torch_xla cannot drive the TPU "
                f"(install it with: pip install 'torch_xla[tpu]=={version}')")
    return xla_import_error()


def _accelerator_type(pci_ids: list[str]) -> str:
    """The TPU type ('v3-8', 'v5litepod-8', '' if unknown): TPU_ACCELERATOR_TYPE (set on TPU VMs and
    in notebooks), else, as only v2 and v3 share a PCI id, for them the VM's metadata server, with a
    timeout (torch_xla's own query has none, and a probe must never hang)."""
    kind = os.environ.get("TPU_ACCELERATOR_TYPE", "")
    if kind or TPU_PCI_GENERATIONS.get(pci_ids[0]) != "v2/v3" or os.environ.get("TPU_SKIP_MDS_QUERY"):
        return kind
    import urllib.request
    try:
        request = urllib.request.Request(METADATA_URL, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=2) as answer:
            return answer.read(64).decode().strip()
    except Exception:
        return ""


def tpu_generation(pci_ids: list[str], accelerator_type: str = "") -> str:
    """'v5e', 'v3', ...: from the accelerator type when known ('v5litepod-8' is a v5e), else PCI."""
    import re
    match = re.match(r"^(?:v|tpu)(\d+)([a-z]*)", accelerator_type)
    if match:
        number, suffix = match.groups()
        return f"v{number}{'e' if suffix in ('litepod', 'lite') else suffix}"
    return TPU_PCI_GENERATIONS.get(pci_ids[0], "?") if pci_ids else "?"


def slice_hosts(env=os.environ) -> int:
    """How many hosts this TPU slice spans (1 where nothing says more), from what torch_xla/_internal/tpu.py
    reads (TPU_WORKER_HOSTNAMES; TPU_PROCESS_BOUNDS or TPU_HOST_BOUNDS), so that a run is refused before
    the runtime starts: once started on one host of a slice, it waits for the others."""
    import math
    import re
    names = [name for name in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if name.strip()]
    bounds = env.get("TPU_PROCESS_BOUNDS") or env.get("TPU_HOST_BOUNDS") or ""
    processes = math.prod(int(b) for b in bounds.split(",")) if re.fullmatch(r"\d+(,\d+)*", bounds) else 1
    return max(len(names), processes, 1)


def cache_in_words(cache: dict) -> str:
    """The compilation cache's counts, with what an unreadable one means for the next Start."""
    said = f"{cache['hit']} hits, {cache['miss']} misses"
    if cache.get("unreadable"):
        said += (f", {cache['unreadable']} found but not loadable (this torch_xla cannot read its cache back on "
                 "this runtime, so every Start compiles again)")
    return said


def multi_host_refusal(hosts: int) -> str | None:
    """Why a run on `hosts` hosts cannot train, or None. Each host's trainer would decide Stop and
    Pause by itself, and the hosts that went on would wait forever in the next step's collective."""
    if hosts <= 1:
        return None
    return (f"A multi-host TPU slice is not supported yet: this run spans {hosts} hosts, and each would "
            "decide Stop and Pause on its own, so the others would hang. Run on one host: a v5e-8 or "
            "v6e-8 host trains on all 8 of its chips.")


def _cpu_has_native_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _cpu_info(notice: str = "") -> DeviceInfo:
    refused = {"fp16": "CPUs have no fast fp16 path and fp16 needs loss scaling; use fp32."}
    warned = {}
    if _cpu_has_native_bf16():
        # Allowed (the seed's precision lesson), never the default: lab/README.md, "bf16 on a CPU".
        warned["bf16"] = ("this CPU computes bfloat16 natively, but at this model's small layers bf16 trained "
                          "no faster than fp32 on such a CPU, so fp32 stays the default.")
    else:
        refused["bf16"] = ("this CPU has no native bfloat16, so bf16 runs hundreds of times slower than fp32 "
                           "(emulated in software). Use fp32.")
    return DeviceInfo("cpu", f"CPU ({os.cpu_count()} cores)", 1, refused, warned, notice,
                      available=os.cpu_count() or 1)


def xla_cpu_device_count() -> int:
    """XLA:CPU devices, as torch_xla counts them: its own CPU_NUM_DEVICES (default 1)."""
    value = os.environ.get("CPU_NUM_DEVICES", "").strip()
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else 1


def _xla_cpu_info() -> DeviceInfo:
    # CPU_NUM_DEVICES=4 gives four XLA:CPU devices that the trainer drives with SPMD, the very program
    # a v5e-8 runs: CI's road to the multi-chip code (../shared/notes/torch_xla.md, section 9).
    count = xla_cpu_device_count()
    return DeviceInfo("xla-cpu", f"XLA:CPU ({count} device{'s' if count > 1 else ''})", count,
                      {"fp16": "XLA devices compute in bfloat16, not float16; use bf16 (no loss scaling needed) or fp32."},
                      {"bf16": "XLA:CPU emulates bfloat16: correct, but slow. It is here to test the TPU path."})


def _tpu_info(pci_ids: list[str]) -> DeviceInfo:
    """A TPU host: one device per chip, and on v2/v3, whose chips have two cores each, one per
    core (v3-8: 4 chips, 8 devices). One trainer process drives them all with SPMD."""
    chips = len(pci_ids)
    generation = tpu_generation(pci_ids, _accelerator_type(pci_ids))
    per_chip = 2 if generation in ("v2", "v3", "v2/v3") else 1
    layout = (f"{chips} chips" + (f", {per_chip} cores each" if per_chip > 1 else "")) if chips > 1 else "1 chip"
    return DeviceInfo(
        "tpu", f"TPU {generation} ({layout})", chips * per_chip,
        {"fp16": "TPUs have no float16 matrix units; use bf16 (same range as fp32, no loss scaling)."},
        {"fp32": "fp32 runs its matrix products at full fp32 precision (mat-mul precision 'highest': six bf16 "
                 "passes per product, per torch_xla's docs), so bf16 is the TPU default."})


def _cuda_info(notice: str = "") -> DeviceInfo:
    import torch
    return cuda_info(torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported(), notice, torch.cuda.device_count())


def cuda_info(name: str, bf16: bool, notice: str = "", available: int = 1) -> DeviceInfo:
    """A CUDA GPU's DeviceInfo from its name and whether it runs bfloat16 (torch-free: the page
    describes ZeroGPU's GPU with it, which the UI process may not touch)."""
    refused = {} if bf16 else {"bf16": f"{name} has no bfloat16 support (needs compute capability 8.0+); "
                                       "use fp16 or fp32."}
    warned = {"fp16": "fp16 trains with a gradient scaler (init 16384, growth 1.5); a DCGAN in fp16 has been "
                      "seen to blow up after ~15 epochs where fp32 and bf16 stayed stable.",
              "fp32": "fp32 convolutions run in TF32 on tensor cores (PyTorch's default, "
                      "torch.backends.cudnn.allow_tf32); matrix products stay in full fp32."}
    return DeviceInfo("cuda", name, 1, refused, warned, notice, available=available)


def probe(requested: str = "auto") -> DeviceInfo:
    """Pick the device: TPU, else CUDA, else CPU; or the one requested, with a notice if absent. A TPU
    is claimed only when torch_xla would really run on it (chips on PCI, libtpu found, PJRT_DEVICE
    unset or TPU), so no page says "TPU" while the run trains on XLA:CPU."""
    if requested not in ("auto",) + KINDS:
        raise ValueError(f"unknown device '{requested}'; choose auto, {', '.join(KINDS)}")
    if requested == "xla-cpu":
        if xla_import_error():
            return _cpu_info(f"XLA:CPU requested but {xla_import_error()}; training on the CPU without XLA.")
        return _xla_cpu_info()
    why_not = ""   # why the device requested is not the one that trains
    if requested in ("auto", "tpu"):
        pci_ids = tpu_pci_ids()
        refusal = _tpu_refusal() if pci_ids else ""
        if pci_ids and not refusal:
            return _tpu_info(pci_ids)
        if pci_ids:
            why_not = f"Found {len(pci_ids)} TPU chip(s), but {refusal}; "
        elif requested == "tpu":
            why_not = f"TPU requested but {xla_import_error() or 'there is no TPU on this machine'}; "
    if requested == "cpu":
        return _cpu_info()
    import torch
    if torch.cuda.is_available():
        return _cuda_info(why_not and why_not + "training on the CUDA GPU.")
    if requested == "cuda":
        why_not = "CUDA requested but no CUDA GPU is visible; "
    return _cpu_info(why_not and why_not + "training on the CPU.")


def default_precision(kind: str) -> str:
    """The precision a run gets unless the user picks one: bf16 on a TPU (its native format, no
    loss scaling), fp32 elsewhere (XLA:CPU emulates bf16 slowly; a CPU without it crawls)."""
    return "bf16" if kind == "tpu" else "fp32"


def prepare_environment(requested: str) -> None:
    """Set what torch_xla reads at import, before anything imports it (the trainer calls this first):
    xla-cpu means the CPU even on a TPU host (PJRT_DEVICE=CPU, with CPU_NUM_DEVICES devices)."""
    if requested == "xla-cpu":
        os.environ["PJRT_DEVICE"] = "CPU"


def probe_in_child_process(requested: str, context, timeout: float = 120.0) -> DeviceInfo:
    """probe() in a child process, so the caller never imports torch_xla nor touches a device.
    context: the multiprocessing context the child comes from (the app's fork server's, which has
    imported torch already, so the probe costs no imports)."""
    reader, writer = context.Pipe(duplex=False)
    # Not a daemon: a daemonic process may start no children, and opening a TPU may; the child is
    # killed below when it does not answer in time.
    child = context.Process(target=_probe_child, args=(requested, writer), name="blink-device-probe")
    child.start()
    writer.close()
    try:
        if not reader.poll(timeout):
            # What hangs there is torch_xla starting the TPU runtime.
            return _cpu_info(f"the TPU runtime did not answer within {timeout:g} s: importing torch_xla or opening the "
                             "TPU hung (another process, such as an earlier cell's app or trainer, may still hold the "
                             "TPU, or the metadata server did not answer); assuming CPU. Stop that process or restart "
                             "the notebook, then run `python -m core.doctor` to see where it stops.")
        answer = reader.recv()
    except EOFError:   # the child died before answering (a crash inside a native library)
        child.join(5)
        answer = f"the probe process ended with exit code {child.exitcode}"
    finally:
        reader.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    if isinstance(answer, str):   # a probe that crashes must not take the UI with it
        return _cpu_info(f"device probe failed ({answer[:200]}); assuming CPU.")
    return DeviceInfo(**answer)


def _probe_child(requested: str, writer) -> None:
    skip_metadata_query(os.environ)
    prepare_environment(requested)
    try:
        answer = probe(requested).to_dict()
    except Exception as exc:
        answer = f"{type(exc).__name__}: {exc}"
    writer.send(answer)
    writer.close()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Print what the chosen device can do, as JSON.")
    parser.add_argument("--device", default="auto", choices=("auto",) + KINDS)
    requested = parser.parse_args().device
    prepare_environment(requested)
    print(json.dumps(probe(requested).to_dict()))
