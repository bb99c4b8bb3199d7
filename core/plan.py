"""A run's plan: what the config, the device and the data make of a run, worked out once.

    plan = make_plan(config, device, DataFacts.of(dataset))   # ConfigError naming the field
    plan.config        # the config as it trains: preset, precision and every default concrete
    plan.describe()    # what will train, in words: the page before Start, the doctor

As stylegan2-ada settles its "training options" once and saves them as training_options.json,
one function turns (config, device, data) into a frozen Plan, and every reader takes that: the page
makes one before Start (the device from its probe, the data from dataset_info, no decoding), the
trainer one once its data is loaded, which it writes as the run's config.json and into every
checkpoint; build_training and the Reporter take it, and resume compares the saved plan with the
new one. Validation happens here, in one place. No torch: the UI process makes plans.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from core import gans
from core.architecture import model_resolution, resolve_preset
from core.config import LIVE_FIELDS, ConfigError, TrainConfig, augments, validate
from core.devices import ddp_backend


@dataclass(frozen=True)
class DataFacts:
    """What the plan needs of a dataset. None: not known before the images are decoded (the page's
    plan of a folder it has only listed); the trainer's plan knows them all."""
    size: int | None = None
    resolution: int | None = None        # native: the model's resolution is worked out from it
    channels: int | None = None
    classes: int | None = None           # labelled classes (0: unlabelled)
    class_names: tuple[str, ...] = ()    # where the dataset names its classes (a folder's subfolders)

    @classmethod
    def of(cls, dataset) -> "DataFacts":
        """The facts of a loaded dataset (core.data.ImageSet)."""
        labels = dataset.labels
        classes = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        return cls(len(dataset), dataset.resolution, dataset.channels, classes, tuple(dataset.class_names))

    @classmethod
    def from_info(cls, info: dict) -> "DataFacts":
        """The facts core.data.dataset_info reports before any decoding."""
        return cls(info.get("size"), info.get("resolution"), info.get("channels"), info.get("classes"),
                   tuple(info.get("class_names") or ()))


def resolved_for(config: TrainConfig, device_kind: str, processes: int = 1) -> tuple[TrainConfig, str]:
    """The config a run trains with on this kind of device (in `processes` processes where torchrun
    started them), and why it has its preset: the preset, the GAN type and the precision 'auto'
    become concrete, and hyper-parameters left None take their defaults for that type and preset
    (TrainConfig.resolved). A config resolved already comes back the same."""
    from core.devices import default_precision   # no torch: devices imports it lazily
    preset, reason = resolve_preset(config.preset, device_kind)
    gan = (gans.auto_name(preset, device_kind, max(processes, config.processes), config.dataset)
           if config.gan == "auto" else config.gan)
    precision = default_precision(device_kind) if config.precision == "auto" else config.precision
    return dataclasses.replace(dataclasses.replace(config, gan=gan).resolved(preset), preset=preset,
                               precision=precision), reason


@dataclass(frozen=True)
class Plan:
    config: TrainConfig             # resolved: what trains
    preset_reason: str
    device: Any                     # core.devices.DeviceInfo: where it trains
    data: DataFacts
    resolution: int | None          # the model's (the data is resized to it)
    classes: int | None             # 0: unconditional
    class_names: tuple[str, ...]
    augment: bool | None            # D sees augmented images
    augment_reason: str
    batch_reason: str = ""          # why the batch is not the one asked for ("": it is)
    # The host's settings changes, in order, each with the step it took effect after:
    # {"step": 45, "settings": {"lr_d": 0.002}, "before": {"lr_d": 0.0002}}. `config` holds the
    # newest values; a checkpoint's plan holds those of its own step (core/resume.py rolls back).
    changes: tuple[dict, ...] = ()

    @property
    def gan(self) -> gans.GanType:
        return gans.get(self.config.gan)

    @property
    def batch_per_device(self) -> int:
        """Each device's rows of a batch: split over the devices (SPMD) or the processes (DDP)."""
        return self.config.batch_size // max(self.device.shards, 1)

    # ---- saved as the run's config.json and in every checkpoint --------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "config": self.config.to_dict(), "preset_reason": self.preset_reason,
                "device": self.device.to_dict(), "data": dataclasses.asdict(self.data),
                "resolution": self.resolution, "classes": self.classes, "class_names": list(self.class_names),
                "augment": self.augment, "augment_reason": self.augment_reason, "batch_reason": self.batch_reason,
                "changes": list(self.changes)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Plan":
        from core.devices import DeviceInfo
        data = dict(values["data"], class_names=tuple(values["data"].get("class_names") or ()))
        return cls(config=TrainConfig.from_dict(values["config"]), preset_reason=values["preset_reason"],
                   device=DeviceInfo(**values["device"]), data=DataFacts(**data), resolution=values["resolution"],
                   classes=values["classes"], class_names=tuple(values["class_names"]), augment=values["augment"],
                   augment_reason=values["augment_reason"], batch_reason=values.get("batch_reason", ""),
                   changes=tuple(values.get("changes") or ()))

    def differences(self, other: "Plan") -> list[str]:
        """What differs between two plans of one run but its length and the settings the host may
        change while it trains (their history is `changes`): a checkpoint of the one cannot continue
        as the other (its weights have other shapes, or its optimizer other settings)."""
        built = [name for name in ("resolution", "classes") if getattr(self, name) != getattr(other, name)]
        if self.data.channels != other.data.channels:
            built.append("channels")
        return self.config.differences(other.config, ignore=("steps", "processes", *LIVE_FIELDS)) + built

    def changed(self, step: int, settings: dict) -> "Plan":
        """This plan with the host's change of `settings` (core.config.live_change's checks passed)
        taking effect after `step`, kept in its history."""
        before = {name: getattr(self.config, name) for name in settings}
        change = {"step": step, "settings": dict(settings), "before": before}
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **settings),
                                   changes=(*self.changes, change))

    def at_step(self, step: int, keep_later: bool = True) -> "Plan":
        """This plan as it trained at `step` (a checkpoint's): the settings changed after it rolled
        back. keep_later: the later changes stay in the history, to take effect again at their steps
        (core/train.py); else they are dropped."""
        later = [c for c in self.changes if c["step"] > step]
        config = self.config
        for change in reversed(later):
            config = dataclasses.replace(config, **change["before"])
        kept = self.changes if keep_later else tuple(c for c in self.changes if c["step"] <= step)
        return dataclasses.replace(self, config=config, changes=kept)

    def describe(self) -> str:
        """What will train, in words."""
        cfg = self.config
        size = f" at {self.resolution}x{self.resolution}" if self.resolution else ""
        parts = [f"{self.gan.label}, model size {cfg.preset}{size} ({self.preset_reason})"]
        if self.classes:
            parts.append(f"class-conditional on {self.classes} classes")
        elif self.classes == 0:
            parts.append("unconditional")
        if self.augment is not None:
            parts.append(f"augmentation {self.augment_reason}")
        split = ""
        if self.device.processes > 1:
            split = f" = {self.batch_per_device} per {self.device.shard_name} on {self.device.processes} (DDP)"
        elif self.device.devices > 1:
            split = f" = {self.batch_per_device} per device on {self.device.devices}"
        why = f" ({self.batch_reason})" if self.batch_reason else ""
        parts.append(f"batch {cfg.batch_size}{split}{why}, {cfg.precision}, {cfg.steps:,} steps on {self.device.name}")
        return "; ".join(parts) + "."


PLAN_FORMAT = "blink-plan-v1"


def make_plan(config: TrainConfig, device, data: DataFacts = DataFacts()) -> Plan:
    """The plan of a run of `config` on `device` (core.devices.DeviceInfo) from `data`, or a
    ConfigError naming the field when it cannot work there: every check, in one place."""
    resolved, preset_reason = resolved_for(config, device.kind, device.processes)
    resolved, device = processes_for(resolved, device)
    resolved, batch_reason = batch_the_set_allows(resolved, data.size, device.shards)
    validate(resolved, dataset_size=data.size, device_caps=device.to_dict(), preset=resolved.preset)
    refused_here(resolved, device)
    resolution = model_resolution(resolved.preset, data.resolution) if data.resolution else None
    # Class-conditional when the dataset has labels and the config leaves it "auto": a viewer can
    # ask for a class, and on MNIST it learns faster (lab/README.md, "Conditional").
    classes = data.classes if resolved.conditional == "auto" else 0
    augment, augment_reason = augments(resolved, data.size, classes or 0) if data.size else (None, "")
    return Plan(config=resolved, preset_reason=preset_reason, device=device, data=data, resolution=resolution,
                classes=classes, class_names=data.class_names if classes else (), augment=augment,
                augment_reason=augment_reason, batch_reason=batch_reason)


def processes_for(config: TrainConfig, device) -> tuple[TrainConfig, Any]:
    """The run's trainer processes, and the device as they use it (DDP when more than one): under
    torchrun the processes it started; else those asked for, 0 meaning one per CUDA GPU, else one.
    Refused (ConfigError) where they cannot be: more than the machine has, or several on an XLA device."""
    if device.processes > 1:   # launched: torchrun decided
        if config.processes not in (0, device.processes):
            raise ConfigError(f"processes {config.processes} asked for, but torchrun started {device.processes}: "
                              "leave processes at 0 under torchrun.")
        return dataclasses.replace(config, processes=device.processes), device
    row = gans.BY_NAME.get(config.gan)   # an unknown type is validate's to refuse
    one_process = row is not None and "processes" in row.refused   # 0 means one process for such a type
    count = config.processes or (device.available if device.kind == "cuda" and not one_process else 1)
    if count > 1 and device.kind in ("tpu", "xla-cpu"):
        raise ConfigError(f"processes {count}: {device.name} trains in one process, which drives every device "
                          "(SPMD); leave processes at 0 or 1.")
    if count > device.available:
        what = "GPUs" if device.kind == "cuda" else "cores"
        raise ConfigError(f"processes {count}: {device.name} has {device.available} {what}, one per process; "
                          f"use at most {device.available}.")
    if count > 1:
        device = dataclasses.replace(device, processes=count, backend=ddp_backend(device.kind))
    return dataclasses.replace(config, processes=count), device


def refused_here(config: TrainConfig, device) -> None:
    """A GAN type whose row refuses this device or several processes (core/gans.py `refused`):
    ConfigError naming the field, with the row's reason."""
    refused = gans.get(config.gan).refused
    if "xla" in refused and device.kind in ("tpu", "xla-cpu"):
        raise ConfigError(f"gan {config.gan} does not train on {device.name}: {refused['xla']}. Use another GAN type "
                          "there, or a CPU or CUDA device.")
    if "processes" in refused and config.processes > 1:
        raise ConfigError(f"gan {config.gan} trains in one process: {refused['processes']}. Set processes to 1.")


def batch_the_set_allows(config: TrainConfig, size: int | None, shards: int) -> tuple[TrainConfig, str]:
    """A set smaller than the batch asked for trains on batches of the whole set (rounded down to
    split evenly over the devices), and says so: a class's 90 photos start, at the form's default
    batch, rather than being refused. A set too small to give every device an image is left to
    validate's refusal."""
    if not size or config.batch_size <= size or size < shards:
        return config, ""
    batch = size // shards * shards
    return (dataclasses.replace(config, batch_size=batch),
            f"lowered from {config.batch_size}: the set has {size:,} images")
