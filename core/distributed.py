"""One run over several processes, as torchrun starts them: PyTorch's DistributedDataParallel (DDP).

    torchrun --nproc-per-node 2 -m core.train --device cpu ...   # gloo on the CPU; NCCL on CUDA GPUs

Each process is a rank. Rank 0 leads: it alone reads the run's request file and writes the run
directory. Every rank trains its own rows of each global batch, and DDP averages the gradients.
Everything that differs under torchrun is here; the trainer reaches it through core/train.py's CLI
(joining, sharing the run) and the device layer (core/runtime.py Runtime: the device, the wrap, the
reductions):

    ranks = Ranks.join()            # torchrun's RANK, WORLD_SIZE, LOCAL_RANK; init_process_group
    ranks.share(value)              # rank 0's value on every rank (the run to train, a checkpoint)
    ranks.agree(code)               # the largest of every rank's code: one small all-reduce
    ranks.average(tensor)           # the mean over the ranks (the logged losses)
    ranks.sync_batch_norms(module)  # BatchNorm over the global batch; ranks.wrap(module): DDP
    SharedControl(ranks, control)   # core/control.py's decisions, taken by rank 0 for every rank

Every rank starts from the same seed, so their random numbers run in step: the batch's order is
drawn whole in each and each takes its block (core/data/stream.py `rows`), as are G's noise and
WGAN-GP's mixing weights (Runtime.random_rows). So N processes train what one does on the same
global batch and seed, to rounding (tests/unit/test_ddp.py), and a checkpoint's random state and
batch order are any rank's: it continues with any number of processes. Augmentation (small sets)
draws for a rank's own rows, the same numbers in every rank: such runs train alike, not to rounding.

Not under torchrun (or under it with one process) none of this runs.
"""
from __future__ import annotations

import os
import warnings

from core import devices
from core.control import wait_out_pause

# How long a rank waits in one collective before it gives up with an error. A rank that dies closes
# its connections, so the others fail at once (and torchrun ends them); this bound is for a rank that
# hangs without dying, or another machine's rank torchrun cannot see. It must outlast what rank 0
# alone does between two steps while the others wait: a checkpoint, a grid, the quality meter's
# first measurement. A paused run waits in short collectives (SharedControl), never one long one.
COLLECTIVE_TIMEOUT_SECONDS = 600

# The decisions every rank acts on, by code: agreeing on the largest lets a rank asked to stop by a
# signal of its own (torchrun forwards SIGINT and SIGTERM to every rank) stop them all.
DECISIONS = ("run", "step", "pause", "stop", "gone")


def launched(env=os.environ) -> bool:
    """Whether torchrun started this process as one of several (one process is a plain run)."""
    return int(env.get("WORLD_SIZE", "1") or 1) > 1


def where_launched(env=os.environ) -> str:
    """This process's place under torchrun, in words (the doctor's line)."""
    if not launched(env):
        return ("not launched under torchrun: one trainer process (`torchrun --nproc-per-node N -m core.train ...` "
                "trains one run over N processes, DDP)")
    return (f"rank {env.get('RANK')} of {env.get('WORLD_SIZE')} (local rank {env.get('LOCAL_RANK')} on this "
            f"machine), rendezvous at {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}")


class Ranks:
    """This process's place among the run's processes, and the collectives they share."""

    def __init__(self, rank: int, world: int, local_rank: int):
        self.rank, self.world, self.local_rank = rank, world, local_rank
        self.stop_asked = False   # a signal asked this rank to stop: SharedControl tells the others

    @classmethod
    def join(cls) -> "Ranks":
        """Join the run's process group from torchrun's environment. Collectives on CUDA tensors go
        over NCCL, the rest (the decisions, the shared run) over gloo: a decision never waits for a GPU."""
        import datetime
        import torch
        import torch.distributed as dist
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available() and local_rank < torch.cuda.device_count():
            # Before any CUDA work (the device probe's included): it lands on this rank's own GPU,
            # where every rank would otherwise open a context on GPU 0.
            torch.cuda.set_device(local_rank)
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS))
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)

    @property
    def leads(self) -> bool:
        """Rank 0: the one that reads the requests and writes the run directory."""
        return self.rank == 0

    def leave(self) -> None:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()

    def ask_to_stop(self) -> None:
        self.stop_asked = True

    @staticmethod
    def lost_another(exc: BaseException) -> bool:
        """Whether `exc` is a collective that failed, as one does when another rank has ended
        (gloo: "Connection reset by peer"; NCCL: its watchdog's error)."""
        import torch.distributed as dist
        text = str(exc)
        return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and ("gloo" in text or "NCCL" in text))

    def describe(self, info):
        """The device's DeviceInfo as this run uses it: `processes` ranks, each driving one device.
        ValueError for a device DDP does not drive here: XLA trains several devices from one process."""
        if info.kind not in devices.DDP_KINDS:
            raise ValueError(f"Device {info.kind} trains in one process (SPMD over its devices): run it without "
                             "torchrun. Under torchrun each process drives one CUDA GPU or the CPU.")
        if info.is_cuda:
            import torch
            gpus = torch.cuda.device_count()
            if self.local_rank >= gpus:
                raise ValueError(f"torchrun started more processes on this machine than it has CUDA GPUs ({gpus}): "
                                 f"use --nproc-per-node {gpus} or fewer.")
        return info.in_processes(self.world)

    # ---- collectives: every rank calls each one, in the same order -------------------------
    def share(self, value):
        """Rank 0's value (anything picklable) on every rank; the others' `value` is ignored."""
        import torch.distributed as dist
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def agree(self, code: int) -> int:
        """The largest of every rank's code. A CPU tensor: over gloo, without a GPU sync."""
        import torch
        import torch.distributed as dist
        tensor = torch.tensor([code], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def average(self, tensor):
        """The mean of `tensor` over the ranks (gloo has no AVG: a sum, divided)."""
        import torch.distributed as dist
        total = tensor.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total / self.world

    def sync_batch_norms(self, module):
        """`module` with each of its BatchNorms normalising over the global batch of every rank
        (core/models.py SyncedBatchNorm2d), weights and statistics kept: a checkpoint's keys are a
        plain BatchNorm's, so a run saved by N processes loads in one and back."""
        from core.models import FP32BatchNorm2d, SyncedBatchNorm2d
        for name, child in module.named_children():
            if type(child) is FP32BatchNorm2d:
                synced = SyncedBatchNorm2d(child.num_features, child.eps, child.momentum)
                synced.load_state_dict(child.state_dict())
                setattr(module, name, synced.to(child.weight.device))
            else:
                self.sync_batch_norms(child)
        return module

    def wrap(self, module):
        """The module under DDP, which averages its gradients over the ranks in the backward pass
        and, once, broadcasts rank 0's weights and buffers to the others."""
        from torch.nn.parallel import DistributedDataParallel
        # A weight of one input channel in channels_last has strides DDP's buckets call mismatched
        # (a size-1 dimension's stride means nothing): a warning of a cost, on every rank, not an error.
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        on_gpu = next(module.parameters()).device.type == "cuda"
        # Buffers are not broadcast at each forward: BatchNorm's statistics are the global batch's
        # on every rank (SyncedBatchNorm2d), and spectral norm's vectors follow the same weights.
        return DistributedDataParallel(module, device_ids=[self.local_rank] if on_gpu else None,
                                       broadcast_buffers=False)


class SharedControl:
    """core/control.py's Control, decided by rank 0 for every rank: rank 0 reads the request file,
    and each answer is agreed in one small all-reduce, so every rank logs, pauses, steps and stops
    at the same step. A paused run agrees every PAUSE_POLL_SECONDS: no rank waits in one collective
    for as long as the pause lasts (it would time out)."""

    def __init__(self, ranks: Ranks, control=None):
        """control: rank 0's Control; None on the other ranks, which never read the run directory."""
        self.ranks, self.control = ranks, control

    def _agreed(self, decision: str) -> str:
        own = DECISIONS.index(decision)
        if self.ranks.stop_asked:
            own = max(own, DECISIONS.index("stop"))
        return DECISIONS[self.ranks.agree(own)]

    def decision(self) -> str:
        return self._agreed(self.control.decision() if self.control else "run")

    def request_waiting(self) -> bool:
        waiting = self.control.request_waiting() if self.control else False
        return self.ranks.agree(int(waiting or self.ranks.stop_asked)) > 0

    def wait_while_paused(self) -> str:
        return wait_out_pause(self.decision, self.control.run if self.control else None)

    def step_count(self) -> int:
        return self.ranks.share(self.control.step_count() if self.control else 0)

    def step_updates(self) -> str:
        return self.ranks.share(self.control.step_updates() if self.control else "both")

    def settings(self) -> dict:
        return self.ranks.share(self.control.settings() if self.control else {})

    def cpu_threads(self) -> int | None:
        return self.ranks.share(self.control.cpu_threads() if self.control else None)

    def paused_again(self) -> None:
        if self.control:
            self.control.paused_again()

    def ended(self) -> None:
        if self.control:
            self.control.ended()
