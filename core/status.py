"""A run's status: the one schema of status.json, which the trainer writes and every viewer reads.

The trainer (core/train.py) writes it through RunDir.write_status; the job, the page, the live
feed and the /status API read it as attributes, and scripts get `to_dict()` as JSON. Runs on disk
written by an older Blink load too: `from_dict` fills missing fields with their defaults and
ignores keys this schema no longer has.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class Status:
    # preparing (the data, on the CPU, before a chunked run's first GPU call) | waiting (for a GPU
    # call) | starting | compiling | running | paused | done | stopped | failed; "" before any
    state: str = ""
    message: str = ""                 # what the student reads: what happened and what to do (a failure's hint included)
    updated: float = 0.0              # time.time() of the write: viewers redraw when it changes
    step: int = 0
    steps: int = 0                    # the run's total
    saved_step: int = 0               # the step of the last checkpoint: where a resume continues
    pid: int | None = None            # the trainer process: the only one, whatever the device count
    device: str = ""                  # e.g. "CPU (2 cores)", from core.devices.DeviceInfo
    device_kind: str = ""             # tpu | xla-cpu | cuda | cpu
    devices: int = 1                  # devices the trainer drives (SPMD when > 1), or its processes' (DDP)
    processes: int = 1                # trainer processes (torchrun: DDP, a device each) when > 1
    layout: str = ""                  # how, in words (core.devices.DeviceInfo.layout)
    batch_size: int = 0               # the global batch: each device gets batch_size / devices
    batch_reason: str = ""            # why it is not the batch asked for (core/plan.py batch_the_set_allows)
    precision: str = ""
    gan: str = ""
    preset: str = ""                  # the model preset that runs (never "auto")
    preset_reason: str = ""
    resolution: int = 0               # the size the model trains at (the grids' tiles)
    augment: str = ""                 # whether D sees augmented images and why (core/config.py augments)
    classes: int = 0                  # > 0: class-conditional on that many classes
    class_names: list = field(default_factory=list)   # what class i is, where the dataset names them (class subfolders)
    steps_per_second: float | None = None     # None until measured (compilation left out)
    images_per_second: float | None = None
    seconds_left: float | None = None
    elapsed: float = 0.0              # training seconds, earlier sessions of a resumed run included
    warning: str = ""                 # a problem the run goes on with (D has won, mode collapse, memory nearly full)
    phase: str = ""                   # what is happening, in words (core/phase.py): noise, blobs, ... digits; D winning
    notice: str = ""                  # about the device (e.g. why a requested one fell back)
    stepped_from: int = 0             # > 0 while paused after a Step: the step it started from (grids before/after)
    chunk: int = 0                    # > 0: the run trains in chunks (ZeroGPU) and is in this one
    chunk_ended: int = 0              # the last chunk that ended by itself, its checkpoint saved (app/chunks.py)
    chunk_margin: float = 0.0         # the most seconds a chunk's call spent besides training: the next call asks for them
    diagnostics: dict[str, Any] = field(default_factory=dict)   # the Diagnostics panel's rows, by name
    # A Stop or Pause pressed and not yet acted on: the job fills it in for viewers from the run's
    # request file; the trainer never sets it.
    request: str = ""
    # The trainer's last sign of life (time.time()), while it has been silent too long to be merely
    # busy (core/heartbeat.py silent_since): the job fills it in for viewers; the trainer never sets it.
    silent_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Status":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
