"""The device layer: everything that differs between TPU (PyTorch/XLA), CUDA and CPU.

This is the only module that imports torch_xla, and only inside functions: importing it
starts nothing, and a missing or broken torch_xla (no wheel for the platform, a torch version
it was not built for) turns into a notice and a fallback, never a crash.

Two entry points:
- `probe(requested)` says what a device can do (kind, name, cores, which precisions it runs
  well and why not). The UI calls it through `probe_in_subprocess` so that the UI process
  itself never imports torch_xla or touches an accelerator.
- `Runtime` is what the trainer uses inside its own process: the torch device, autocast,
  optimizer steps (all-reduced on XLA), step closures for reading values without a sync
  inside the step, cross-replica means, memory and compile counters.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

KINDS = ("tpu", "xla-cpu", "cuda", "cpu")

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
    cores: int = 1                              # replicas the trainer will run
    precision_refused: dict[str, str] = field(default_factory=dict)   # precision -> reason
    precision_warned: dict[str, str] = field(default_factory=dict)    # precision -> caveat
    notice: str = ""                            # e.g. why a requested device fell back

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
    try:
        import torch_xla  # noqa: F401  (the one guarded import point)
    except Exception as exc:  # ImportError, or an undefined symbol from a torch mismatch
        return f"torch_xla unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    return ""


def _google_accelerators_on_pci() -> bool:
    """True if a Google (TPU) PCI device is present: vendor 0x1ae0, what torch_xla itself checks.

    Looking here first keeps a CPU or GPU machine from paying the ~5 s torch_xla import.
    """
    import glob
    for vendor_file in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            if open(vendor_file).read().strip() == "0x1ae0":
                return True
        except OSError:
            continue
    return bool(glob.glob("/dev/accel*")) or bool(os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"))


def _tpu_chips() -> int:
    """Number of TPU chips on this host, without initialising the XLA runtime."""
    if not _google_accelerators_on_pci() or xla_import_error():
        return 0
    try:
        from torch_xla._internal import tpu
        return int(tpu.num_available_chips())
    except Exception:
        return 0


def _cpu_has_native_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _cpu_info(notice: str = "") -> DeviceInfo:
    bf16_reason = ("" if _cpu_has_native_bf16() else
                   "this CPU has no native bfloat16, so bf16 runs hundreds of times slower than fp32 "
                   "(a 2048x2048 matmul: 0.3 vs 160 GFLOP/s measured on a 2-core x86 machine). Use fp32.")
    refused = {"fp16": "CPUs have no fast fp16 path and fp16 needs loss scaling; use fp32."}
    if bf16_reason:
        refused["bf16"] = bf16_reason
    return DeviceInfo("cpu", f"CPU ({os.cpu_count()} cores)", 1, refused, {}, notice)


def _xla_cpu_info(notice: str = "") -> DeviceInfo:
    # Always one replica, whatever CPU_NUM_DEVICES says: collectives across several XLA:CPU
    # devices under torch_xla.launch hang (one thread per device, mismatched op ids; upstream
    # pytorch/xla#5342, #9089), so `launch` never replicates on XLA:CPU. Multi-device XLA:CPU
    # is exercised by the SPMD test instead.
    return DeviceInfo(
        "xla-cpu", "XLA:CPU (1 device)", 1,
        {"fp16": "XLA devices compute in bfloat16, not float16; use bf16 (no loss scaling needed) or fp32."},
        {"bf16": "XLA:CPU emulates bfloat16: correct, but slow. It is here to test the TPU path."},
        notice)


def _tpu_cores(chips: int) -> int:
    """TPU devices (replicas) on this host, without initialising the XLA runtime.

    A chip has 2 cores on v2/v3 and 1 (megacore) from v4 on. torch_xla reads the generation
    from TPU_ACCELERATOR_TYPE or the VM's metadata; if that fails we guess from the chip
    count (4 chips is most often a v2/v3-8 on Colab/Kaggle). The trainer reports the real
    number (status 'cores') once the runtime is up.
    """
    forced = int(os.environ.get("TPU_NUM_DEVICES", "0") or 0)
    if forced:
        return forced
    try:
        from torch_xla._internal import tpu
        return int(tpu.num_available_devices()) or max(chips, 1)
    except Exception:
        return max(chips, 1) * (2 if chips == 4 else 1)


def _tpu_info(chips: int, notice: str = "") -> DeviceInfo:
    cores = _tpu_cores(chips)
    return DeviceInfo(
        "tpu", f"TPU ({cores} cores)", cores,
        {"fp16": "TPUs have no float16 matrix units; use bf16 (same range as fp32, no loss scaling)."},
        {}, notice)


def _cuda_info(notice: str = "") -> DeviceInfo:
    import torch
    name = torch.cuda.get_device_name(0)
    refused = {}
    if not torch.cuda.is_bf16_supported():
        refused["bf16"] = f"{name} has no bfloat16 support (needs compute capability 8.0+); use fp16 or fp32."
    warned = {"fp16": "fp16 trains with a gradient scaler (init 16384, growth 1.5); a DCGAN in fp16 has been "
                      "seen to blow up after ~15 epochs where fp32 and bf16 stayed stable."}
    return DeviceInfo("cuda", name, 1, refused, warned, notice)


def probe(requested: str = "auto") -> DeviceInfo:
    """Pick the device: TPU, else CUDA, else CPU; or the one requested, with a notice if absent."""
    if requested not in ("auto",) + KINDS:
        raise ValueError(f"unknown device '{requested}'; choose auto, {', '.join(KINDS)}")
    if requested in ("auto", "tpu"):
        chips = _tpu_chips()
        if chips:
            return _tpu_info(chips)
        if requested == "tpu":
            why = xla_import_error() or "torch_xla found no TPU on this machine"
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


def probe_in_subprocess(requested: str = "auto", timeout: float = 120.0) -> DeviceInfo:
    """probe() in a child process, so the caller never imports torch_xla nor touches a device."""
    cmd = [sys.executable, "-m", "core.devices", "--device", requested]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root, check=True)
        return DeviceInfo(**json.loads(out.stdout.strip().splitlines()[-1]))
    except Exception as exc:  # a probe that crashes must not take the UI with it
        detail = getattr(exc, "stderr", "") or str(exc)
        return _cpu_info(f"device probe failed ({str(detail).strip().splitlines()[-1][:200] if detail else exc}); "
                         "assuming CPU.")


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
    """One replica's view of the device. On TPU there is one Runtime per core."""

    def __init__(self, info: DeviceInfo):
        import torch
        self.info = info
        self.kind = info.kind
        self.is_xla = info.kind in ("tpu", "xla-cpu")
        if self.is_xla:
            import torch_xla
            import torch_xla.runtime as xr
            self._xla, self._xr = torch_xla, xr
            self.device = torch_xla.device()          # from the runtime, never a hard-coded "xla:0"
            self.world_size = xr.world_size()
            self.rank = xr.global_ordinal()
        else:
            self.device = torch.device("cuda" if info.kind == "cuda" else "cpu")
            self.world_size, self.rank = 1, 0
            if info.kind == "cuda":
                # Batch shapes never change (drop_last), so cuDNN's one-off algorithm search
                # pays for itself after the first step.
                torch.backends.cudnn.benchmark = True
        self.is_master = self.rank == 0
        # XLA_ALWAYS_ALLREDUCE=1 keeps collectives in the graph even with one replica; we honour
        # it too (loss means, stop/pause agreement), so a 1-device run exercises the exact
        # multi-core code path (the only way to run it on XLA:CPU, see _xla_cpu_info).
        self.replicated = self.is_xla and (
            self.world_size > 1 or os.environ.get("XLA_ALWAYS_ALLREDUCE", "0").lower() in ("1", "true"))

    # ---- seeding --------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Seed torch and the device RNG; each replica gets its own noise stream."""
        import torch
        torch.manual_seed(seed + self.rank)
        if self.is_xla:
            # torch.manual_seed does not reach the XLA RNG: without this every replica
            # draws identical noise.
            self._xla.manual_seed(seed + self.rank)

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
        """loss.backward() then the optimizer step; all-reduced across replicas on XLA."""
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()   # after every step: without it a single overflow leaves NaN forever
            return
        loss.backward()
        if self.is_xla:
            import torch_xla.core.xla_model as xm
            xm.optimizer_step(optimizer)   # all-reduce gradients, then step
        else:
            optimizer.step()

    def mark_step(self) -> None:
        """End of one traced step on XLA (cut the graph and dispatch it); no-op elsewhere."""
        if self.is_xla:
            self._xla.sync()

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
            # One device-to-host copy for all values: one CUDA sync, not one per value.
            floats = torch.stack([tensors[k].detach().float().reshape(()) for k in names]).cpu().tolist()
            fn(dict(zip(names, floats)))

    def mean_across_replicas(self, tensors: dict) -> dict:
        """Global means of scalar tensors: one core's loss is not the model's loss."""
        if not self.replicated:
            return tensors
        import torch
        import torch_xla.core.xla_model as xm
        names = sorted(tensors)
        stacked = torch.stack([tensors[k].float() for k in names])
        reduced = xm.all_reduce(xm.REDUCE_SUM, stacked, scale=1.0 / self.world_size)
        return {k: reduced[i] for i, k in enumerate(names)}

    def any_replica(self, flag: bool) -> bool:
        """True on every replica if flag is true on any: stop / pause decisions must agree.

        Replicas read the control file at slightly different moments; if one stopped while the
        others stepped on, their next all-reduce would wait forever. Out-of-graph rendezvous
        (xm.mesh_reduce, which syncs first), so call it between steps, never inside one; and
        every replica must make the same sequence of calls (decide only on agreed values).
        """
        if not self.replicated:
            return bool(flag)
        import torch_xla.core.xla_model as xm
        with warnings.catch_warnings():   # mesh_reduce calls the deprecated xm.xla_device()
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(xm.mesh_reduce("blink_any_replica", int(bool(flag)), max))

    def broadcast_parameters(self, module) -> None:
        """Start every replica from replica 0's weights."""
        if self.is_xla and self.world_size > 1:
            import torch_xla.core.xla_model as xm
            xm.broadcast_master_param(module)

    # ---- diagnostics ----------------------------------------------------------------
    def memory(self) -> tuple[int, int] | None:
        """(bytes used, bytes total) of device memory, or None where the runtime cannot say."""
        try:
            if self.is_xla:
                import torch_xla.core.xla_model as xm
                info = xm.get_memory_info(self.device)
                return int(info["bytes_used"]), int(info["bytes_limit"])
            if self.kind == "cuda":
                import torch
                free, total = torch.cuda.mem_get_info(self.device)
                return int(total - free), int(total)
        except Exception:   # XLA:CPU raises UNIMPLEMENTED: GetAllocatorStats
            return None
        return None

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


def launch(fn: Callable, args: tuple, info: DeviceInfo, num_cores: int = 0) -> None:
    """Run fn(rank, *args) once per replica: torch_xla.launch on a multi-core TPU, else inline.

    num_cores: 0 = every core; 1 = a single replica (torch_xla's single-process mode, so the
    process owns one core, not all of them). torch_xla.launch cannot start any other count
    (its nprocs is None or 1), so other values run on every core.
    XLA:CPU is never replicated: its cross-device collectives hang (see _xla_cpu_info).
    """
    if info.kind == "tpu" and info.cores > 1:
        import torch_xla
        torch_xla.launch(fn, args=args, debug_single_process=num_cores == 1)
    else:
        fn(0, *args)


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description="Print what the chosen device can do, as JSON.")
    parser.add_argument("--device", default="auto", choices=("auto",) + KINDS)
    print(json.dumps(probe(parser.parse_args().device).to_dict()))
