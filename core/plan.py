"""A run's plan: what the config, the device and the data make of a run, worked out once.

    plan = plan_run(config, device)   # the data's facts from its listing; ConfigError naming the field
    plan.config        # the config as it trains: preset, precision and every default concrete
    plan.describe()    # what will train, in words: the page before Start, the CLI's --dry-run

As stylegan2-ada settles its "training options" once and saves them as training_options.json, the
plan is made where the run is asked for (the page's Start, the CLI), from facts known before any
image is decoded, and written once as the run's config.json. The trainer reads it and only checks
it against the device and the data it finds (`check`); a live settings change,
a comparison and a resume derive a new plan through `replan`, and so make_plan's checks. No torch:
the UI process makes plans.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from core import gans
from core.architecture import model_resolution, resolve_preset
from core.config import LIVE_FIELDS, ConfigError, TrainConfig, augments, choose, validate
from core.devices import DeviceInfo, default_precision

PLAN_FORMAT = "blink-plan-v2"


@dataclass(frozen=True)
class DataFacts:
    """What the plan needs of a dataset. None: not known before the images are decoded (a folder's
    channels: grey or colour)."""
    size: int | None = None
    resolution: int | None = None        # native: the model's resolution is worked out from it
    channels: int | None = None
    classes: int | None = None           # labelled classes (0: unlabelled)
    class_names: tuple[str, ...] = ()    # where the dataset names its classes (a folder's subfolders)
    unreadable: int = 0                  # files a decoded folder left out (its listing counted them)

    @classmethod
    def of(cls, dataset) -> "DataFacts":
        """The facts of a loaded dataset (core.data.ImageSet)."""
        labels = dataset.labels
        classes = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        return cls(len(dataset), dataset.resolution, dataset.channels, classes, tuple(dataset.class_names),
                   dataset.skipped)

    @classmethod
    def listed(cls, dataset: str, data_path: str = "", max_mb: int | None = None) -> "DataFacts":
        """The facts core.data.dataset_info reports before decoding (a folder's from its listing);
        ConfigError in the dataset's own words where it cannot be had (offline, an empty folder)."""
        from core import data
        from core.config import DATASETS
        if dataset not in DATASETS:
            return cls()   # the plan refuses the name, with the choices
        info = data.dataset_info(dataset, data_path, max_mb or data.DEFAULT_MAX_MB)
        if not info["available"]:
            raise ConfigError(info["message"])
        return cls(info.get("size"), info.get("resolution"), info.get("channels"), info.get("classes"),
                   tuple(info.get("class_names") or ()))


@dataclass(frozen=True)
class Plan:
    asked: TrainConfig              # as asked for ('auto' and None left): what a new plan is made from
    config: TrainConfig             # resolved: what trains
    gan: gans.GanType               # the row of config.gan
    preset_reason: str
    device: DeviceInfo              # where it trains
    data: DataFacts
    resolution: int | None          # the model's (the data is resized to it)
    classes: int | None             # 0: unconditional
    class_names: tuple[str, ...]
    augment: bool | None            # D sees augmented images
    augment_reason: str
    batch_reason: str = ""          # why the batch is not the one asked for ("": it is)
    # The host's settings changes, in order, each with the step it took effect after:
    # {"step": 45, "settings": {"lr_d": 0.002}, "before": {"lr_d": 0.0002}}. `config` holds the
    # newest values; a checkpoint's plan holds those of its own step (at_step rolls back).
    changes: tuple[dict, ...] = ()

    @property
    def batch_per_device(self) -> int:
        """Each device's rows of a batch: split over the devices (SPMD) or the processes (DDP)."""
        return self.config.batch_size // max(self.device.shards, 1)

    # ---- saved as the run's config.json and in every checkpoint --------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "asked": self.asked.to_dict(), "config": self.config.to_dict(),
                "preset_reason": self.preset_reason, "device": self.device.to_dict(),
                "data": dataclasses.asdict(self.data), "resolution": self.resolution, "classes": self.classes,
                "class_names": list(self.class_names), "augment": self.augment,
                "augment_reason": self.augment_reason, "batch_reason": self.batch_reason,
                "changes": list(self.changes)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Plan":
        """The plan config.json holds; ValueError for a file of another format (an older Blink's)."""
        if values.get("format") != PLAN_FORMAT:
            raise ValueError("its config.json was written by an older Blink")
        config = TrainConfig.from_dict(values["config"])
        data = dict(values["data"], class_names=tuple(values["data"].get("class_names") or ()))
        return cls(asked=TrainConfig.from_dict(values["asked"]), config=config, gan=gans.get(config.gan),
                   preset_reason=values["preset_reason"], device=DeviceInfo(**values["device"]),
                   data=DataFacts(**data), resolution=values["resolution"], classes=values["classes"],
                   class_names=tuple(values["class_names"]), augment=values["augment"],
                   augment_reason=values["augment_reason"], batch_reason=values["batch_reason"],
                   changes=tuple(values["changes"]))

    # ---- new plans of the same run ---------------------------------------------------------
    def replan(self, on: DeviceInfo | None = None, changes: tuple[dict, ...] | None = None, **values) -> "Plan":
        """The plan of this run asked for with `values` changed (on device `on`, else its own), made
        and checked as a Start's; its history of changes `changes`, else this plan's."""
        return make_plan(dataclasses.replace(self.asked, **values), on or self.device, self.data,
                         self.changes if changes is None else changes)

    def changed(self, step: int, settings: dict) -> "Plan":
        """This plan with the host's change of `settings` (LIVE_FIELDS) taking effect after `step`,
        kept in its history; ConfigError naming the field, as a Start's, for a value refused."""
        unknown = sorted(set(settings) - set(LIVE_FIELDS))
        if unknown:
            raise ConfigError(f"{unknown[0]} cannot change while a run trains; these can: {', '.join(LIVE_FIELDS)}.")
        change = {"step": step, "settings": dict(settings),
                  "before": {name: getattr(self.config, name) for name in settings}}
        return self.replan(changes=(*self.changes, change), **settings)

    def at_step(self, step: int, keep_later: bool = True) -> "Plan":
        """This plan as it trained at `step` (a checkpoint's): the settings changed after it rolled
        back. keep_later: the later changes stay in the history, to take effect again at their steps
        (core/train.py); else they are dropped."""
        later = [c for c in self.changes if c["step"] > step]
        rolled = {name: value for change in reversed(later) for name, value in change["before"].items()}
        kept = self.changes if keep_later else tuple(c for c in self.changes if c["step"] <= step)
        return self.replan(changes=kept, **rolled)

    def differences(self, other: "Plan") -> list[str]:
        """What differs between two plans of one run but its length, its processes and the settings
        the host may change while it trains (their history is `changes`): a checkpoint of the one
        cannot continue as the other (its weights have other shapes, or its optimizer other settings)."""
        built = [name for name in ("resolution", "classes") if getattr(self, name) != getattr(other, name)]
        if None not in (self.data.channels, other.data.channels) and self.data.channels != other.data.channels:
            built.append("channels")
        return self.config.differences(other.config, ignore=("steps", "processes", *LIVE_FIELDS)) + built

    # ---- the trainer's checks --------------------------------------------------------------
    def check(self, found: DataFacts, device: DeviceInfo | None = None) -> None:
        """ConfigError when the trainer finds another device than the plan was made for, or data
        other than the plan was made from (a folder changed since Start), or too few readable
        images for its batch."""
        planned = (self.device.kind, self.device.devices, self.device.processes)
        if device is not None and (device.kind, device.devices, device.processes) != planned:
            raise ConfigError(f"The device changed since Start: the run was planned for {self.device.name} "
                              f"({self.device.layout}), and this trainer has {device.name} ({device.layout}). "
                              "Start it again to plan it for this one.")
        listed = self.data
        size_fits = listed.size in (None, found.size, found.size + found.unreadable)
        same = (size_fits and listed.resolution in (None, found.resolution)
                and listed.classes in (None, found.classes)
                and (not listed.class_names or tuple(listed.class_names) == tuple(found.class_names)))
        if not same:
            raise ConfigError(f"The images changed since Start: the run was planned for {_facts_in_words(listed)}, "
                              f"and {_facts_in_words(found)} are there now. Press Start again to plan it for them.")
        if self.config.batch_size > found.size:
            raise ConfigError(f"batch_size {self.config.batch_size} is larger than the {found.size:,} images that "
                              f"could be read ({found.unreadable:,} could not): press Start again, which plans "
                              "for the readable ones.")

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


def _facts_in_words(facts: DataFacts) -> str:
    classes = f" in {facts.classes} classes" if facts.classes else ""
    return f"{facts.size:,} images{classes}" if facts.size is not None else "its images"


def plan_run(config: TrainConfig, device: DeviceInfo) -> Plan:
    """The plan of a run of `config` on `device`, from its dataset's facts as listed (no decoding)."""
    return make_plan(config, device, DataFacts.listed(config.dataset, config.data_path, config.max_image_mb))


def make_plan(asked: TrainConfig, device: DeviceInfo, data: DataFacts = DataFacts(),
              changes: tuple[dict, ...] = ()) -> Plan:
    """The plan of a run of `asked` on `device` from `data`, or a ConfigError naming the field when
    it cannot work there: every check, in one place. 'auto' and None become concrete here. changes:
    the run's history of settings changes (Plan.changes), for a new plan of a run under way."""
    choose("gan", asked.gan)   # an unknown type refused with the choices, before its row is read
    preset, preset_reason = resolve_preset(asked.preset, device.kind)
    processes, device = processes_for(asked, device)
    name = (gans.auto_name(preset, device.kind, processes, asked.dataset) if asked.gan == "auto" else asked.gan)
    gan = gans.get(name)
    precision = default_precision(device.kind) if asked.precision == "auto" else asked.precision
    chosen = dict(gan=name, precision=precision, processes=processes)
    batch, batch_reason = batch_the_set_allows(asked.resolved(preset, **chosen).batch_size, data.size, device.shards)
    resolved = asked.resolved(preset, **chosen, batch_size=batch)
    validate(resolved, dataset_size=data.size, device_caps=device.to_dict())
    refused_here(gan, resolved, device)
    resolution = model_resolution(preset, data.resolution) if data.resolution else None
    # Class-conditional when the dataset has labels and the config leaves it "auto": a viewer can
    # ask for a class, and on MNIST it learns faster (lab/README.md, "Conditional").
    classes = data.classes if resolved.conditional == "auto" else 0
    augment, augment_reason = augments(resolved, data.size, classes or 0) if data.size else (None, "")
    return Plan(asked=asked, config=resolved, gan=gan, preset_reason=preset_reason, device=device, data=data,
                resolution=resolution, classes=classes, class_names=data.class_names if classes else (),
                augment=augment, augment_reason=augment_reason, batch_reason=batch_reason, changes=changes)


def processes_for(asked: TrainConfig, device: DeviceInfo) -> tuple[int, DeviceInfo]:
    """The run's trainer processes, and the device as they use it (DDP when more than one): under
    torchrun the processes it started; else those asked for, 0 meaning one per CUDA GPU, else one.
    Refused (ConfigError) where they cannot be: more than the machine has, or several on an XLA device."""
    if device.processes > 1:   # launched: torchrun decided
        if asked.processes not in (0, device.processes):
            raise ConfigError(f"processes {asked.processes} asked for, but torchrun started {device.processes}: "
                              "leave processes at 0 under torchrun.")
        return device.processes, device
    row = gans.BY_NAME.get(asked.gan)
    one_process = row is not None and "processes" in row.refused   # 0 means one process for such a type
    count = asked.processes or (device.available if device.is_cuda and not one_process else 1)
    if count > 1 and device.is_xla:
        raise ConfigError(f"processes {count}: {device.name} trains in one process, which drives every device "
                          "(SPMD); leave processes at 0 or 1.")
    if count > device.available:
        what = "GPUs" if device.is_cuda else "cores"
        raise ConfigError(f"processes {count}: {device.name} has {device.available} {what}, one per process; "
                          f"use at most {device.available}.")
    if count > 1:
        device = device.in_processes(count)
    return count, device


def refused_here(gan: gans.GanType, config: TrainConfig, device: DeviceInfo) -> None:
    """A GAN type whose row refuses this device or several processes (core/gans.py `refused`):
    ConfigError naming the field, with the row's reason."""
    if "xla" in gan.refused and device.is_xla:
        raise ConfigError(f"gan {gan.name} does not train on {device.name}: {gan.refused['xla']}. Use another GAN "
                          "type there, or a CPU or CUDA device.")
    if "processes" in gan.refused and config.processes > 1:
        raise ConfigError(f"gan {gan.name} trains in one process: {gan.refused['processes']}. Set processes to 1.")


def batch_the_set_allows(batch: int, size: int | None, shards: int) -> tuple[int, str]:
    """A set smaller than the batch asked for trains on batches of the whole set (rounded down to
    split evenly over the devices), and says so: a class's 90 photos start, at the form's default
    batch, rather than being refused. A set too small to give every device an image is left to
    validate's refusal."""
    if not size or batch <= size or size < shards:
        return batch, ""
    return size // shards * shards, f"lowered from {batch}: the set has {size:,} images"
