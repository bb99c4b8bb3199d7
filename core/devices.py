"""The device layer: everything that differs between TPU (PyTorch/XLA), CUDA and CPU.

This is the only module that imports torch_xla, and only inside functions: importing it
starts nothing, and a missing or broken torch_xla (no wheel for the platform, a torch version
it was not built for) turns into a notice and a fallback, never a crash.

Two entry points:
- `probe(requested)` says what a device can do (kind, name, device count, which precisions it runs
  well and why not). The UI calls it through `probe_in_child_process` so that the UI process
  itself never imports torch_xla or touches an accelerator.
- `Runtime` is what the trainer uses inside its own process: the torch device (with several
  XLA devices, an SPMD data mesh over all of them), autocast, optimizer steps, step closures
  for reading values without a sync inside the step, memory and compile counters.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

KINDS = ("tpu", "xla-cpu", "cuda", "cpu")
# The kinds that train on this machine's own CPU: on ZeroGPU no GPU call is asked for them.
CPU_KINDS = ("xla-cpu", "cpu")
XLA_KINDS = ("tpu", "xla-cpu")   # one process drives every device (SPMD), through torch_xla
DDP_KINDS = ("cuda", "cpu")      # several processes (torchrun's ranks) may train one run


# What a kind of device is, asked by name (a status's device_kind, a DeviceInfo's kind): the only
# place outside this module and the plan that names the kinds is this, so a kind is declared once.
def is_xla(kind: str) -> bool:
    return kind in XLA_KINDS


def is_tpu(kind: str) -> bool:
    return kind == "tpu"


def is_accelerator(kind: str) -> bool:
    """A TPU or a CUDA GPU: the compute for the larger models."""
    return kind in ("tpu", "cuda")


def is_cuda(kind: str) -> bool:
    return kind == "cuda"


def is_cpu(kind: str) -> bool:
    """The plain CPU (not XLA:CPU)."""
    return kind == "cpu"


def ddp_backend(kind: str) -> str:
    """The collectives' backend of a run of several processes on this kind."""
    return "nccl" if is_cuda(kind) else "gloo"

# The seed's fp16 scaler for GANs: a lower initial scale than torch's 65536 (GAN losses spike,
# and every overflow costs a skipped step), gentler growth, update after every step.
FP16_SCALER = dict(init_scale=16384.0, growth_factor=1.5, backoff_factor=0.5, growth_interval=2000)

# Ops that XLA:CPU runs on the host by design; anything else in the fallback list is a defect.
# _local_scalar_dense is `.item()` (our step closures read values after the step);
# the upsample backward is only lowered on TPU (we never upsample, but a user model could).
ALLOWED_FALLBACK_OPS = frozenset({"aten::_local_scalar_dense", "aten::upsample_nearest2d_backward"})


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
        if self.processes > 1:
            return "GPU" if self.is_cuda else "process"
        return "device"

    def batch_layout(self, batch_size: int) -> str:
        """The layout with the batch's split, e.g. "2 processes (DDP, gloo), batch 16 = 8 per process";
        "2 GPUs (DDP, nccl), batch 128 = 64 per GPU" (a process a GPU)."""
        if self.processes > 1:
            return f"{self.layout}, batch {batch_size} = {batch_size // self.shards} per {self.shard_name}"
        return self.layout

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------
# Detection
# ------------------------------------------------------------------------------------------
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
    """PCI device ids of the TPU chips on this host (one entry per chip); [] on other machines.

    Read from sysfs, as torch_xla does: a CPU or GPU machine never pays the torch_xla import."""
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
    """Set TPU_SKIP_MDS_QUERY=1 in env when no TPU chip is on PCI.

    torch_xla (_internal/tpu.py) learns the TPU type from the GCE metadata server, with no timeout,
    unless TPU_SKIP_MDS_QUERY is set: then it reads TPU_ACCELERATOR_TYPE and friends instead. Off a
    TPU VM no metadata server answers, so a query there could hang whoever imports torch_xla. On a TPU
    host the query is how torch_xla learns the generation, so there it is left alone."""
    if not tpu_pci_ids():
        env.setdefault("TPU_SKIP_MDS_QUERY", "1")


def libtpu_found() -> bool:
    """Whether torch_xla will find libtpu, by its own rules (torch_xla/__init__.py,
    _setup_tpu_vm_library_path), without importing torch_xla: TPU_LIBRARY_PATH, a libtpu.so
    bundled in torch_xla/lib, or the libtpu package that the `torch_xla[tpu]` extra installs."""
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
        return ("libtpu is not installed, so torch_xla cannot drive the TPU "
                f"(install it with: pip install 'torch_xla[tpu]=={_installed_xla_version()}')")
    return xla_import_error()


def _installed_xla_version() -> str:
    """The installed torch_xla's version (the libtpu it wants comes with its own [tpu] extra)."""
    import importlib.metadata
    try:
        return importlib.metadata.version("torch_xla")
    except importlib.metadata.PackageNotFoundError:
        return "2.9.0"


def _accelerator_type(pci_ids: list[str]) -> str:
    """The TPU type, e.g. 'v3-8' or 'v5litepod-8', or '' if unknown.

    TPU_ACCELERATOR_TYPE first (set on TPU VMs and in notebooks). Only v2 and v3 share a PCI
    id, so only then is the VM's metadata server asked, with a timeout: torch_xla's own query
    has none, and a probe must never hang on a host whose metadata server does not answer.
    """
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
        suffix = {"litepod": "e", "lite": "e"}.get(suffix, suffix)
        return f"v{number}{suffix}"
    return TPU_PCI_GENERATIONS.get(pci_ids[0], "?") if pci_ids else "?"


def slice_hosts(env=os.environ) -> int:
    """How many hosts this TPU slice spans, from what torch_xla's TPU set-up reads
    (torch_xla/_internal/tpu.py: TPU_WORKER_HOSTNAMES; TPU_PROCESS_BOUNDS, or TPU_HOST_BOUNDS), so a
    run is refused before the runtime starts: once started on one host of a slice, it waits for the
    others. 1 where none of them says more."""
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


def _xla_cpu_info(notice: str = "") -> DeviceInfo:
    # CPU_NUM_DEVICES=4 gives four XLA:CPU devices that the trainer drives with SPMD, the very
    # program a v5e-8 runs: CI's road to the multi-chip code (notes/torch_xla.md section 9).
    count = xla_cpu_device_count()
    return DeviceInfo(
        "xla-cpu", f"XLA:CPU ({count} device{'s' if count > 1 else ''})", count,
        {"fp16": "XLA devices compute in bfloat16, not float16; use bf16 (no loss scaling needed) or fp32."},
        {"bf16": "XLA:CPU emulates bfloat16: correct, but slow. It is here to test the TPU path."},
        notice)


def _tpu_info(pci_ids: list[str], notice: str = "") -> DeviceInfo:
    """A TPU host: one device per chip, and on v2/v3, whose chips have two cores each, one per
    core (v3-8: 4 chips, 8 devices). One trainer process drives them all with SPMD."""
    chips = len(pci_ids)
    generation = tpu_generation(pci_ids, _accelerator_type(pci_ids))
    cores_per_chip = 2 if generation in ("v2", "v3", "v2/v3") else 1
    cores = chips * cores_per_chip
    layout = f"{chips} chips" + (f", {cores_per_chip} cores each" if cores_per_chip > 1 else "")
    return DeviceInfo(
        "tpu", f"TPU {generation} ({layout})" if chips > 1 else f"TPU {generation} (1 chip)", cores,
        {"fp16": "TPUs have no float16 matrix units; use bf16 (same range as fp32, no loss scaling)."},
        {"fp32": "fp32 runs its matrix products at full fp32 precision (mat-mul precision 'highest': six bf16 "
                 "passes per product, per torch_xla's docs), so bf16 is the TPU default."},
        notice)


def _cuda_info(notice: str = "") -> DeviceInfo:
    import torch
    info = cuda_info(torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported())
    info.notice = notice
    info.available = torch.cuda.device_count()
    return info


def cuda_info(name: str, bf16: bool) -> DeviceInfo:
    """A CUDA GPU's DeviceInfo from its name and whether it runs bfloat16 (torch-free: the page
    describes ZeroGPU's GPU with it, which the UI process may not touch)."""
    refused = {} if bf16 else {"bf16": f"{name} has no bfloat16 support (needs compute capability 8.0+); "
                                       "use fp16 or fp32."}
    warned = {"fp16": "fp16 trains with a gradient scaler (init 16384, growth 1.5); a DCGAN in fp16 has been "
                      "seen to blow up after ~15 epochs where fp32 and bf16 stayed stable.",
              "fp32": "fp32 convolutions run in TF32 on tensor cores (PyTorch's default, "
                      "torch.backends.cudnn.allow_tf32); matrix products stay in full fp32."}
    return DeviceInfo("cuda", name, 1, refused, warned)


def compile_cache_dir() -> str:
    """Where a TPU's compiled graphs are kept between runs (BLINK_XLA_CACHE_DIR, default
    ~/.cache/blink/xla): one folder for the host, as the runs of every app on it compile the same graphs."""
    return os.path.abspath(os.path.expanduser(os.environ.get("BLINK_XLA_CACHE_DIR")
                                              or os.path.join("~", ".cache", "blink", "xla")))


def probe(requested: str = "auto") -> DeviceInfo:
    """Pick the device: TPU, else CUDA, else CPU; or the one requested, with a notice if absent.

    A TPU is claimed only when torch_xla would really run on it: chips on PCI, libtpu found, and
    PJRT_DEVICE unset or TPU. Otherwise the notice says why not, so no page says "TPU" while
    the run trains on XLA:CPU."""
    if requested not in ("auto",) + KINDS:
        raise ValueError(f"unknown device '{requested}'; choose auto, {', '.join(KINDS)}")
    if requested in ("auto", "tpu"):
        pci_ids = tpu_pci_ids()
        refusal = _tpu_refusal() if pci_ids else ""
        if pci_ids and not refusal:
            return _tpu_info(pci_ids)
        if pci_ids:
            return _fallback_after(f"Found {len(pci_ids)} TPU chip(s), but {refusal}; ")
        if requested == "tpu":
            why = xla_import_error() or "there is no TPU on this machine"
            return _fallback_after(f"TPU requested but {why}; ")
    if requested == "xla-cpu":
        xla_error = xla_import_error()
        if not xla_error:
            return _xla_cpu_info()
        return _cpu_info(f"XLA:CPU requested but {xla_error}; training on the CPU without XLA.")
    if requested in ("auto", "cuda"):
        import torch
        if torch.cuda.is_available():
            return _cuda_info()
        if requested == "cuda":
            return _cpu_info("CUDA requested but no CUDA GPU is visible; training on the CPU.")
    return _cpu_info()


def _fallback_after(prefix: str) -> DeviceInfo:
    import torch
    if torch.cuda.is_available():
        return _cuda_info(prefix + "training on the CUDA GPU.")
    return _cpu_info(prefix + "training on the CPU.")


def default_precision(kind: str) -> str:
    """The precision a run gets unless the user picks one: bf16 on a TPU (its native format, no
    loss scaling), fp32 elsewhere (XLA:CPU emulates bf16 slowly; a CPU without it crawls)."""
    return "bf16" if kind == "tpu" else "fp32"


def prepare_environment(requested: str) -> None:
    """Set what torch_xla reads at import, before anything imports it (the trainer calls this first).

    xla-cpu means the CPU even on a TPU host: PJRT_DEVICE=CPU, with CPU_NUM_DEVICES devices."""
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
            return _cpu_info(f"the TPU runtime did not answer within {timeout:g} s: importing torch_xla or opening "
                             "the TPU hung (another process, such as an earlier cell's app or trainer, may still "
                             "hold the TPU, or the metadata server did not answer); assuming CPU. Stop that "
                             "process or restart the notebook, then run `python -m core.doctor` to see where it "
                             "stops.")
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


# ------------------------------------------------------------------------------------------
# Precision policy
# ------------------------------------------------------------------------------------------
def autocast(kind: str, precision: str):
    """Autocast context for a device kind and precision (a no-op for fp32)."""
    import torch
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    # torch.autocast('xla') rather than torch_xla.amp.autocast: the latter crashes on XLA:CPU.
    device_type = {"tpu": "xla", "xla-cpu": "xla"}.get(kind, kind)
    return torch.autocast(device_type, dtype=dtype)


# ------------------------------------------------------------------------------------------
# Runtime: what the trainer holds inside its process
# ------------------------------------------------------------------------------------------
class Runtime:
    """The trainer's view of its device(s). One per trainer process: with several XLA devices it
    drives them all with SPMD (one program, each batch split over a 1-D data mesh, the weights
    replicated; XLA inserts the gradient reductions), so nothing differs from one device but
    where a batch lives. Under torchrun (`ranks`, core/distributed.py) it is one of several
    processes, each training its rows of every global batch on its own device under DDP."""

    def __init__(self, info: DeviceInfo, ranks=None):
        """ranks: this process's core.distributed.Ranks under torchrun; None for a run in one process."""
        import torch
        self.info = info
        self.kind = info.kind
        self.is_xla = is_xla(info.kind)
        self.mesh = None
        self._batch_shardings: dict[int, object] = {}   # shard_batch's, by the rank of the tensor
        self.ranks = ranks
        self.processes = ranks.world if ranks else 1
        self.device_count = self.processes
        if self.is_xla:
            import torch_xla
            import torch_xla.runtime as xr
            self._xla = torch_xla
            if info.kind == "tpu" and not torch_xla._XLAC._xla_computation_cache_is_initialized():
                # Compiled graphs kept on disk, for a second Start, a Resume or the doctor of the same
                # configuration. Before any computation (torch_xla/runtime.py). torch_xla 2.8 and 2.9
                # cannot load them back on a TPU (pytorch/xla#9094), nor can XLA:CPU: compile_cache
                # counts what it found and could not load, and the page and the doctor say so.
                xr.initialize_cache(compile_cache_dir(), readonly=False)
            if info.devices > 1:
                # Before any tensor reaches an XLA device (pytorch/xla's SPMD guide).
                xr.use_spmd()
                import torch_xla.distributed.spmd as xs
                # From the runtime's global count, not the probe's (which counts this host's chips);
                # a run on several hosts is refused before the runtime starts (train(), slice_hosts).
                self.mesh = xs.get_1d_mesh("data")
                self.device_count = xr.global_runtime_device_count()
            self.device = torch_xla.device()          # from the runtime, never a hard-coded "xla:0"
        elif ranks:
            self.device = ranks.device(info.kind)
        else:
            self.device = torch.device("cuda" if info.kind == "cuda" else "cpu")
        if info.kind == "cuda":
            # Batch shapes never change (drop_last), so cuDNN's one-off algorithm search
            # pays for itself after the first step.
            torch.backends.cudnn.benchmark = True
        self._all_cpu_threads = torch.get_num_threads()   # what "all" means again after a share (use_cpu_threads)

    # ---- one of several processes (torchrun) ------------------------------------------
    @property
    def leads(self) -> bool:
        """Whether this process writes the run directory: the only one, or rank 0 of several."""
        return self.ranks is None or self.ranks.leads

    def share(self, value):
        """Rank 0's value on every process (the value itself in a run of one process)."""
        return self.ranks.share(value) if self.ranks else value

    def average(self, tensor):
        """The mean of a tensor over the processes (the tensor itself in a run of one)."""
        return self.ranks.average(tensor) if self.ranks else tensor

    def local_part(self, tensor):
        """This process's rows of a global batch: a block of batch / N under DDP, all of it otherwise."""
        if self.ranks is None:
            return tensor
        rows = len(tensor) // self.processes
        return tensor[self.ranks.rank * rows:(self.ranks.rank + 1) * rows]

    def sync_batch_norms(self, module):
        """Under DDP, the module's BatchNorms normalise over the global batch; as it is otherwise.
        Before its optimizer is made: the BatchNorms are new modules."""
        return self.ranks.sync_batch_norms(module) if self.ranks else module

    def wrap(self, module):
        """What the step trains: under DDP the module wrapped (gradients averaged over the processes),
        otherwise the module. The checkpoint, the grids and the EMA keep the module itself."""
        return self.ranks.wrap(module) if self.ranks else module

    # ---- seeding --------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Seed torch and the device RNG (torch.manual_seed does not reach XLA's)."""
        import torch
        torch.manual_seed(seed)
        if self.is_xla:
            self._xla.manual_seed(seed)

    def rng_state(self) -> dict:
        """Where the random numbers have got to (the step's noise and the gradient penalty's mix
        are drawn on the device): a checkpoint keeps it, so a resumed run draws what it would have."""
        import torch
        state = {"cpu": torch.get_rng_state()}
        if self.kind == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        elif self.is_xla:
            import torch_xla.core.xla_model as xm
            state["xla"] = xm.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: dict) -> None:
        """Continue from rng_state()'s; a state from another kind of device leaves that device's RNG seeded."""
        import torch
        torch.set_rng_state(state["cpu"])
        if self.kind == "cuda" and "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.device)
        elif self.is_xla and "xla" in state:
            import torch_xla.core.xla_model as xm
            xm.set_rng_state(int(state["xla"]), self.device)

    # ---- where a batch lives ----------------------------------------------------------
    def _batch_spec(self, tensor) -> tuple:
        return ("data",) + (None,) * (tensor.dim() - 1)

    def to_device(self, tensor):
        """A host batch on the device; with a mesh, each device receives only its share."""
        if self.mesh is None:
            return tensor.to(self.device, non_blocking=True)
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.spmd as xs
        sharding = xs.ShardingSpec(self.mesh, self._batch_spec(tensor))
        return xm.send_cpu_data_to_device([tensor], self.device, input_sharding=sharding)[0]

    def random_rows(self, draw, count: int, *shape: int, dtype=None):
        """`draw(rows, *shape)` (torch.randn, torch.rand) for `count` rows of a batch, on the device.
        Under DDP (count: this process's rows) every process draws the whole batch's and keeps its
        rows: their random numbers run in step, so the processes draw what one process draws, and a
        checkpoint's random state is any rank's."""
        return self.local_part(draw(count * self.processes, *shape, device=self.device, dtype=dtype))

    def noise(self, count: int, *shape: int):
        """Standard normal noise for `count` rows of a batch (random_rows), split over the mesh under SPMD."""
        import torch
        return self.shard_batch(self.random_rows(torch.randn, count, *shape))

    def shard_batch(self, tensor):
        """Split a batch made on the device (the noise) over the mesh on its first dimension, through
        the annotation xs.mark_sharding ends in, with the mesh's sharding made once per rank of
        tensor: xs.mark_sharding tries to import jax and torchax at every call, and torch_xla 2.8
        logs "requires jax" each time it finds none, a line per critic update in a notebook."""
        if self.mesh is not None:
            import torch_xla
            if tensor.dim() not in self._batch_shardings:
                self._batch_shardings[tensor.dim()] = self.mesh.get_op_sharding(self._batch_spec(tensor))
            torch_xla._XLAC._xla_mark_sharding(tensor, self._batch_shardings[tensor.dim()])
        return tensor

    def batch_shards(self, tensor) -> list[list[int]]:
        """The shape of each device's piece of a batch, read from the tensor's sharding (a
        diagnostic, read once: it copies the shards to the host)."""
        if self.mesh is None:   # under DDP every process's rows are alike
            return [list(tensor.shape)] * self.processes
        import torch_xla.distributed.spmd as xs
        return [list(shard.data.shape) for shard in xs.XLAShardedTensor(tensor).local_shards]

    # ---- precision ------------------------------------------------------------------
    def autocast(self, precision: str):
        return autocast(self.kind, precision)

    def make_scaler(self, precision: str):
        """A GradScaler for fp16 on CUDA (the seed's GAN settings), else None."""
        if precision != "fp16" or self.kind != "cuda":
            return None
        import torch
        return torch.amp.GradScaler("cuda", **FP16_SCALER)

    # ---- stepping -------------------------------------------------------------------
    def backward_and_step(self, loss, optimizer, scaler=None) -> None:
        """loss.backward() then the optimizer step (under SPMD, XLA reduces the gradients)."""
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()   # after every step: without it a single overflow leaves NaN forever
            return
        loss.backward()
        optimizer.step()

    def mark_step(self) -> None:
        """End of one traced step on XLA (cut the graph and dispatch it); no-op elsewhere."""
        if self.is_xla:
            self._xla.sync()

    def synchronize(self) -> None:
        """Wait until every step dispatched so far has run (a bench's clock needs it; the loop never does)."""
        if self.is_xla:
            self._xla.sync()
            import torch_xla.core.xla_model as xm
            xm.wait_device_ops()
        elif self.kind == "cuda":
            import torch
            torch.cuda.synchronize()

    def read_later(self, fn: Callable[..., None], tensors: dict) -> None:
        """Call fn(dict of floats) once the tensors' values exist, without a sync in the step.

        On XLA this is a step closure: it runs after the step's graph has executed. Elsewhere
        the values are ready; reading them costs one device sync, which the caller only asks
        for every log_every steps.
        """
        if self.is_xla:
            import torch_xla.core.xla_model as xm
            # Inside the closure the tensors are already computed device data: float() is a
            # plain transfer. (Stacking them first would add a graph to compile and run.)
            xm.add_step_closure(lambda values: fn({k: float(v) for k, v in values.items()}), args=(tensors,))
        else:
            import torch
            names = list(tensors)
            # One device-to-host copy for all values: one CUDA sync, not one per value. Under DDP the
            # mean over the processes: each value is a mean over its rows, and the rows are equally many.
            stacked = self.average(torch.stack([tensors[k].detach().float().reshape(()) for k in names]))
            floats = stacked.cpu().tolist()
            fn(dict(zip(names, floats)))

    def use_cpu_threads(self, threads: int) -> None:
        """Use `threads` CPU threads for the host's share of the work (the whole step on a CPU), 0
        for all it started with. Two trainers each with all threads of one CPU are slower together
        than one after the other (bench/README.md, "Runs at once")."""
        import torch
        torch.set_num_threads(min(threads, self._all_cpu_threads) if threads > 0 else self._all_cpu_threads)

    def cpu_threads(self) -> int | None:
        """The CPU threads a CPU run uses (None on an accelerator, where they feed it)."""
        if self.kind != "cpu":
            return None
        import torch
        return torch.get_num_threads()

    # ---- diagnostics ----------------------------------------------------------------
    def memory(self) -> tuple[int, int] | None:
        """(bytes used, bytes total) of the fullest device, or None where the runtime cannot say."""
        return self.fullest(self.memory_per_device())

    def memory_per_device(self) -> list[tuple[int, int]] | None:
        """(bytes used, bytes total) of each device this process drives, or None where the runtime
        cannot say: XLA:CPU keeps no allocator stats (UNIMPLEMENTED: GetAllocatorStats), and under
        SPMD torch_xla 2.9 names only its virtual device to Python, whose memory it refuses to
        report ("MemoryInfo not supported for SPMD virtual device"; there is no xla:1 to ask)."""
        try:
            if self.is_xla:
                import torch_xla.core.xla_model as xm
                infos = [xm.get_memory_info(device) for device in xm.get_xla_supported_devices()]
                return [(int(info["bytes_used"]), int(info["bytes_limit"])) for info in infos]
            if self.kind == "cuda":
                import torch
                free, total = torch.cuda.mem_get_info(self.device)
                return [(int(total - free), int(total))]
        except Exception:
            return None
        return None

    @staticmethod
    def fullest(per_device: list[tuple[int, int]] | None) -> tuple[int, int] | None:
        """The (used, total) of the device nearest to full: the first one out of memory ends the run."""
        if not per_device:
            return None
        return max(per_device, key=lambda stats: stats[0] / stats[1] if stats[1] else 0.0)

    def set_matmul_precision(self, precision: str) -> str | None:
        """fp32 means fp32 on XLA: its default mat-mul precision multiplies fp32 operands in bf16 on
        a TPU (torch_xla/backends/__init__.py), so an fp32 run asks for 'highest'. Returns the
        precision in force (None off XLA, where fp32 products are fp32 already)."""
        if not self.is_xla:
            return None
        import logging
        import torch_xla.backends
        if precision == "fp32" and torch_xla.backends.get_mat_mul_precision() != "highest":
            log = logging.getLogger("torch_xla.backends")
            level = log.level
            log.setLevel(logging.ERROR)   # it warns on every call, though we set it once, before any graph
            try:
                torch_xla.backends.set_mat_mul_precision("highest")
            finally:
                log.setLevel(level)
        return torch_xla.backends.get_mat_mul_precision()

    def execution_count(self) -> int | None:
        """Graph executions so far (XLA only): one per training step, plus grids and quality."""
        if not self.is_xla:
            return None
        import torch_xla.debug.metrics as met
        data = met.metric_data("ExecuteTime")
        return int(data[0]) if data else 0

    def host_transfers(self) -> int | None:
        """Device-to-host transfers so far (XLA only): a step that reads a value back has them."""
        if not self.is_xla:
            return None
        import torch_xla.debug.metrics as met
        data = met.metric_data("TransferFromDeviceTime")
        return int(data[0]) if data else 0

    def compile_seconds(self) -> float:
        """Seconds spent compiling so far (0 off XLA): speed and ETA leave them out."""
        if not self.is_xla:
            return 0.0
        import torch_xla.debug.metrics as met
        data = met.metric_data("CompileTime")
        return data[1] / 1e9 if data else 0.0

    def compiling(self) -> bool:
        """Whether a graph is being compiled right now (XLA only): torch_xla counts a compile as
        uncached when it starts and times it when it ends, and releases Python's lock between,
        so another thread (core/heartbeat.py) can ask while the step waits."""
        if not self.is_xla:
            return False
        import torch_xla.debug.metrics as met
        return (met.counter_value("UncachedCompile") or 0) > (self.compile_count() or 0)

    def compile_cache(self) -> dict | None:
        """The persistent compilation cache's hits, misses and graphs it found but could not load
        ("unreadable": torch_xla 2.8 and 2.9 load through a call the TPU runtime does not implement,
        pytorch/xla#9094, and compile those again); None where no cache is in use."""
        if not self.is_xla:
            return None
        import torch_xla
        if not torch_xla._XLAC._xla_computation_cache_is_initialized():
            return None
        import torch_xla.debug.metrics as met
        return {name: met.counter_value(counter) or 0 for name, counter in (
            ("hit", "PersistentCacheHit"), ("miss", "PersistentCacheMiss"),
            ("unreadable", "PersistentCacheDeserializeFailure"))}

    def compile_count(self) -> int | None:
        """Graph compilations so far (XLA only): it must stop growing once steps repeat."""
        if not self.is_xla:
            return None
        import torch_xla.debug.metrics as met
        data = met.metric_data("CompileTime")
        return int(data[0]) if data else 0

    def fallback_ops(self) -> list[str]:
        """Ops that ran on the host instead of the device (XLA only), minus the expected ones."""
        if not self.is_xla:
            return []
        import torch_xla.debug.metrics as met
        return sorted(set(met.executed_fallback_ops()) - ALLOWED_FALLBACK_OPS)

    def cpu_state_dict(self, module) -> dict:
        """A state dict of CPU tensors in the standard (NCHW) layout: a checkpoint from a TPU must
        load on a laptop, and safetensors refuses the strided weights of a channels_last model."""
        import torch
        return {k: v.detach().to("cpu").contiguous(memory_format=torch.contiguous_format).clone()
                for k, v in module.state_dict().items()}


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Print what the chosen device can do, as JSON.")
    parser.add_argument("--device", default="auto", choices=("auto",) + KINDS)
    requested = parser.parse_args().device
    prepare_environment(requested)
    print(json.dumps(probe(requested).to_dict()))
