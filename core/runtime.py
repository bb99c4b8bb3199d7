"""The trainer's half of the device layer (core/devices.py says what a device can do): the torch
device, the SPMD mesh, autocast, the optimizer step, reading values without a sync in the step, the
memory and compile counters. torch and torch_xla are imported inside functions only. It imports
nothing of core/devices.py, which hands Runtime on, so callers ask one module."""
from __future__ import annotations

import contextlib
import os
from typing import Callable

# Ops that XLA:CPU runs on the host by design; anything else in the fallback list is a defect.
# _local_scalar_dense is `.item()` (our step closures read values after the step);
# the upsample backward is only lowered on TPU (we never upsample, but a user model could).
ALLOWED_FALLBACK_OPS = frozenset({"aten::_local_scalar_dense", "aten::upsample_nearest2d_backward"})


def compile_cache_dir() -> str:
    """Where a TPU's compiled graphs are kept between runs (BLINK_XLA_CACHE_DIR, default
    ~/.cache/blink/xla): one folder for the host, as the runs of every app on it compile the same graphs."""
    return os.path.abspath(os.path.expanduser(os.environ.get("BLINK_XLA_CACHE_DIR")
                                              or os.path.join("~", ".cache", "blink", "xla")))


class Runtime:
    """The trainer's view of its device(s), from the probe's DeviceInfo. One per trainer process: with
    several XLA devices it drives them all with SPMD (each batch split over a 1-D data mesh, the weights
    replicated, XLA inserting the gradient reductions). Under torchrun (`ranks`: core/distributed.py's
    Ranks, else None) it is one of several processes, each training its rows of every batch (DDP)."""

    def __init__(self, info, ranks=None):
        import torch
        self.info, self.kind, self.is_xla, self.ranks = info, info.kind, info.is_xla, ranks
        self.mesh = None
        self._batch_shardings: dict[int, object] = {}   # shard_batch's, by the rank of the tensor
        self.processes = self.device_count = ranks.world if ranks else 1
        if self.is_xla:
            import torch_xla
            import torch_xla.runtime as xr
            self._xla = torch_xla
            if info.kind == "tpu" and not torch_xla._XLAC._xla_computation_cache_is_initialized():
                # Compiled graphs kept on disk for a second Start, a Resume or the doctor; before any
                # computation (torch_xla/runtime.py). torch_xla 2.8 and 2.9 cannot load them back on a
                # TPU (pytorch/xla#9094): compile_cache counts them, and the page and the doctor say so.
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
        elif info.is_cuda and ranks:
            torch.cuda.set_device(ranks.local_rank)   # each rank its own GPU
            self.device = torch.device("cuda", ranks.local_rank)
        else:
            self.device = torch.device("cuda" if info.is_cuda else "cpu")
        if info.is_cuda:
            # Batch shapes never change (drop_last), so cuDNN's one-off algorithm search
            # pays for itself after the first step.
            torch.backends.cudnn.benchmark = True
        self._all_cpu_threads = torch.get_num_threads()   # what "all" means again after a share (use_cpu_threads)

    # ---- one of several processes (torchrun); each the value itself in a run of one ----------
    @property
    def leads(self) -> bool:
        """Whether this process writes the run directory: the only one, or rank 0 of several."""
        return self.ranks is None or self.ranks.leads

    def share(self, value):
        """Rank 0's value on every process."""
        return self.ranks.share(value) if self.ranks else value

    def average(self, tensor):
        """The mean of a tensor over the processes."""
        return self.ranks.average(tensor) if self.ranks else tensor

    def local_part(self, tensor):
        """This process's rows of a global batch: a block of batch / N under DDP."""
        if self.ranks is None:
            return tensor
        rows = len(tensor) // self.processes
        return tensor[self.ranks.rank * rows:(self.ranks.rank + 1) * rows]

    def sync_batch_norms(self, module):
        """Under DDP, BatchNorms over the global batch: new modules, so before the optimizer is made."""
        return self.ranks.sync_batch_norms(module) if self.ranks else module

    def wrap(self, module):
        """What the step trains: under DDP the module wrapped; the checkpoint, grids and EMA keep it bare."""
        return self.ranks.wrap(module) if self.ranks else module

    # ---- seeding --------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Seed torch and the device RNG (torch.manual_seed does not reach XLA's)."""
        import torch
        torch.manual_seed(seed)
        if self.is_xla:
            self._xla.manual_seed(seed)

    def rng_state(self) -> dict:
        """Where the random numbers have got to: a checkpoint keeps it, so a resumed run draws what it would have."""
        import torch
        state = {"cpu": torch.get_rng_state()}
        if self.info.is_cuda:
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        elif self.is_xla:
            import torch_xla.core.xla_model as xm
            state["xla"] = xm.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: dict) -> None:
        """Continue from rng_state()'s; a state from another kind of device leaves that device's RNG seeded."""
        import torch
        torch.set_rng_state(state["cpu"])
        if self.info.is_cuda and "cuda" in state:
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
        Under DDP every process draws the whole batch's and keeps its rows: their random numbers run
        in step, so they draw what one process draws, and a checkpoint's random state is any rank's."""
        return self.local_part(draw(count * self.processes, *shape, device=self.device, dtype=dtype))

    def noise(self, count: int, *shape: int):
        """Standard normal noise for `count` rows of a batch (random_rows), split over the mesh under SPMD."""
        import torch
        return self.shard_batch(self.random_rows(torch.randn, count, *shape))

    def shard_batch(self, tensor):
        """Split a batch made on the device (the noise) over the mesh on its first dimension, through the
        annotation xs.mark_sharding ends in, not xs.mark_sharding, which tries to import jax at every
        call and in 2.8 logs each miss (../shared/notes/torch_xla.md, section 10)."""
        if self.mesh is not None:
            import torch_xla
            if tensor.dim() not in self._batch_shardings:
                self._batch_shardings[tensor.dim()] = self.mesh.get_op_sharding(self._batch_spec(tensor))
            torch_xla._XLAC._xla_mark_sharding(tensor, self._batch_shardings[tensor.dim()])
        return tensor

    def batch_shards(self, tensor) -> list[list[int]]:
        """The shape of each device's piece of a batch (a diagnostic: it copies the shards to the host)."""
        if self.mesh is None:   # under DDP every process's rows are alike
            return [list(tensor.shape)] * self.processes
        import torch_xla.distributed.spmd as xs
        return [list(shard.data.shape) for shard in xs.XLAShardedTensor(tensor).local_shards]

    # ---- precision ------------------------------------------------------------------
    def autocast(self, precision: str):
        """Autocast for the precision (a no-op for fp32)."""
        import torch
        if precision == "fp32":
            return contextlib.nullcontext()
        # torch.autocast('xla') rather than torch_xla.amp.autocast: the latter crashes on XLA:CPU
        # (../shared/notes/torch_xla.md, section 0).
        return torch.autocast("xla" if self.is_xla else self.kind,
                              dtype=torch.bfloat16 if precision == "bf16" else torch.float16)

    def make_scaler(self, precision: str):
        """A GradScaler for fp16 on CUDA, else None: the seed's for GANs, a lower initial scale than torch's
        65536 (GAN losses spike, and every overflow costs a skipped step) and gentler growth."""
        if precision != "fp16" or not self.info.is_cuda:
            return None
        import torch
        return torch.amp.GradScaler("cuda", init_scale=16384.0, growth_factor=1.5, backoff_factor=0.5,
                                    growth_interval=2000)

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
        """End of one traced step on XLA (cut the graph and dispatch it)."""
        if self.is_xla:
            self._xla.sync()

    def synchronize(self) -> None:
        """Wait until every step dispatched so far has run (a bench's clock needs it; the loop never does)."""
        if self.is_xla:
            self._xla.sync()
            import torch_xla.core.xla_model as xm
            xm.wait_device_ops()
        elif self.info.is_cuda:
            import torch
            torch.cuda.synchronize()

    def read_later(self, fn: Callable[..., None], tensors: dict) -> None:
        """fn(dict of floats) once the tensors' values exist: on XLA a step closure, run after the step's
        graph (no sync in the step); elsewhere one device sync, which the caller asks for every log_every."""
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
            fn(dict(zip(names, stacked.cpu().tolist())))

    def use_cpu_threads(self, threads: int) -> None:
        """Use `threads` CPU threads (0: all it started with): two trainers each with all of one CPU's
        are slower together than one after the other (bench/README.md, "Runs at once")."""
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
        """(bytes used, bytes total) of each device this process drives, or None where the runtime cannot
        say: XLA:CPU keeps no allocator stats (../shared/notes/torch_xla.md, section 1), and under SPMD
        torch_xla 2.9 refuses the memory of the one (virtual) device it names to Python."""
        try:
            if self.is_xla:
                import torch_xla.core.xla_model as xm
                infos = [xm.get_memory_info(device) for device in xm.get_xla_supported_devices()]
                return [(int(info["bytes_used"]), int(info["bytes_limit"])) for info in infos]
            if self.info.is_cuda:
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

    def _metric(self, name: str, index: int = 0):
        """torch_xla's metric `name`: its count, or at index 1 its total (ns); 0 before any, None off XLA."""
        if not self.is_xla:
            return None
        import torch_xla.debug.metrics as met
        data = met.metric_data(name)
        return data[index] if data else 0

    def execution_count(self) -> int | None:
        """Graph executions so far: one per training step, plus grids and quality."""
        return self._metric("ExecuteTime")

    def host_transfers(self) -> int | None:
        """Device-to-host transfers so far: a step that reads a value back has them."""
        return self._metric("TransferFromDeviceTime")

    def compile_count(self) -> int | None:
        """Graph compilations so far: it must stop growing once steps repeat."""
        return self._metric("CompileTime")

    def compile_seconds(self) -> float:
        """Seconds spent compiling so far (0 off XLA): speed and ETA leave them out."""
        return (self._metric("CompileTime", 1) or 0) / 1e9

    def compiling(self) -> bool:
        """Whether a graph is being compiled now: torch_xla counts an uncached compile when it starts and
        times it when it ends, releasing Python's lock between, so core/heartbeat.py can ask meanwhile."""
        if not self.is_xla:
            return False
        import torch_xla.debug.metrics as met
        return (met.counter_value("UncachedCompile") or 0) > (self.compile_count() or 0)

    def compile_cache(self) -> dict | None:
        """The persistent compilation cache's hits, misses and graphs found but not loadable (torch_xla
        2.8 and 2.9 on a TPU: pytorch/xla#9094); None where no cache is in use."""
        if not self.is_xla:
            return None
        import torch_xla
        if not torch_xla._XLAC._xla_computation_cache_is_initialized():
            return None
        import torch_xla.debug.metrics as met
        return {name: met.counter_value(counter) or 0 for name, counter in (
            ("hit", "PersistentCacheHit"), ("miss", "PersistentCacheMiss"),
            ("unreadable", "PersistentCacheDeserializeFailure"))}

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
