"""The one configuration object of a run.

The UI builds a TrainConfig from the form, the CLI builds one from its flags, the trainer
receives it, and every checkpoint stores it. `validate()` refuses bad values with a message
that says what to change, before any process starts.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

from core import gans
from core.architecture import PRESET_WIDTH

# Every dataset a run can learn from: the keys of core/data/sources.py SOURCES, in its order; the
# row says the rest, the page's label included (tests/unit/test_shape.py holds the two together).
# Named here rather than read from the rows, which would bring numpy and the loaders into every
# reader of a config (and close an import circle through core/rundir.py).
DATASETS = ("bundled-mnist", "mnist", "fashion-mnist", "cifar10", "celeba", "folder")
GANS = ("auto", *gans.NAMES)   # auto: resolved per device and preset (core/gans.py auto_name)
PRESETS = ("auto", *PRESET_WIDTH)   # auto: resolved per device (core/architecture.py resolve_preset)
PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "tpu", "xla-cpu", "cuda", "cpu")
CONDITIONAL = ("auto", "off")   # auto: class-conditional when the dataset has labels
AUGMENT = ("auto", "on", "off")   # auto: on below AUGMENT_BELOW images (a class, when conditional)
# Measured on the benchmark set (lab/README.md, "Augmentation at three sizes of the set"): without
# it, a conditional run on 111 images a class came to draw one image per class as D learnt the set;
# MNIST (1,000 a class) and CIFAR (5,000) train without it as before.
AUGMENT_BELOW = 500
MAX_STEPS = 1_000_000           # a demo's longest run; also the most any step interval may be

# The seed's batch: DCGAN's fastest on a CPU too; a GAN type's fast preset may set its own (core/gans.py).
BATCH_SIZE = 128

# Latent size: the seed's 100 for its 64x64 DCGAN; 16 for the CPU preset, which reaches digits in
# fewer steps with it (lab/README.md, "Conditional").
Z_DIM = {"default": 100, "fast": 16}


def option(default, help: str, label: str = "", choices: tuple[str, ...] = (),
           range: tuple[int, int | None] | None = None):
    """A TrainConfig field with what `validate`, the page, its query-string presets and the CLI's
    --help read about it: `choices`, or a whole-number `range` (low, high; high None: no upper
    limit), `label` (the page's name for it) and `help`."""
    return field(default=default, metadata=dict(help=help, label=label, choices=choices, range=range))


# Fields an older Blink saved that no longer mean anything: dropped when its runs are read.
# num_cores chose how many TPU replica processes to launch; one process now drives every device.
RETIRED_FIELDS = ("num_cores",)


class ConfigError(ValueError):
    """A config value the user must change; the message says which and how."""


@dataclass
class TrainConfig:
    dataset: str = option("bundled-mnist", "the images to learn", "Dataset", DATASETS)
    data_path: str = option("", "folder or zip of images, for dataset folder", "Image folder or zip (for 'My images')")
    gan: str = option("auto", "the loss family (core/gans.py); auto: the relativistic pairing with R1 for MNIST on a "
                              "CPU's fast preset (digits soonest there), else DCGAN", "GAN type", GANS)
    preset: str = option("auto", "network size: fast (CPU, the data's size up to 32x32), dcgan64 (the seed's 64x64)",
                         "Model size", PRESETS)
    conditional: str = option("auto", "auto: a class-conditional GAN when the dataset has labels; off",
                              "Class-conditional", CONDITIONAL)
    augment: str = option("auto", f"D sees its images randomly shifted, recoloured and cut (DiffAugment, as often as "
                                  f"D needs: ADA); auto: on under {AUGMENT_BELOW:,} images (a class, when conditional)", "Augmentation", AUGMENT)
    batch_size: int | None = option(None, "images per step, over all devices: each of N devices gets batch/N; "
                                          f"default: the GAN type's for the preset (64 for rpgan's fast preset), else "
                                          f"the seed's {BATCH_SIZE}", "Batch size", range=(1, 4096))
    precision: str = option("auto", "number format of the forward and backward passes; auto: bf16 on a TPU, "
                                    "else fp32", "Precision", ("auto",) + PRECISIONS)
    device: str = option("auto", "where to train; auto picks a TPU, then CUDA, then the CPU", "Device", DEVICES)
    steps: int = option(2000, "generator updates", "Training length (steps)", range=(1, MAX_STEPS))
    lr_g: float | None = option(None, "generator learning rate; default: the GAN type's")
    lr_d: float | None = option(None, "discriminator learning rate; default: the GAN type's")
    beta1: float | None = option(None, "Adam beta1; default: the GAN type's")
    beta2: float | None = option(None, "Adam beta2; default: the GAN type's")
    n_critic: int | None = option(None, "D steps per G step; default: the GAN type's", range=(1, 20))
    gp_weight: float = option(10.0, "WGAN-GP penalty weight (lambda)")
    ema: float | None = option(None, "decay of the moving average of G's weights that grids, quality and the "
                                     "saved generator sample from (0: sample G itself); default: 0.99 for "
                                     "the fast preset of dcgan and rpgan, else 0")
    lr_decay_start: float | None = option(None, "share of the run after which both learning rates fall linearly "
                                                "toward 0 at its last step (CycleGAN's schedule; 1: constant); "
                                                "default: 0.5 for the fast preset of dcgan and rpgan, else 1")
    z_dim: int | None = option(None, "latent size; default: the seed's 100, or 16 for the fast preset",
                               range=(1, None))
    seed: int = option(0, "random seed: the same seed and settings start the same run; another seed, another run",
                       "Seed", range=(0, 2**31 - 1))
    log_every: int = option(25, "steps between loss points and status updates", "Log every (steps)",
                           range=(1, 100_000))
    grid_every: int = option(100, "steps between fixed-noise grids", "Grid every (steps)", range=(1, 100_000))
    checkpoint_every: int = option(500, "steps between checkpoints (also at stop and end)", "Checkpoint every (steps)",
                                   range=(1, MAX_STEPS))
    processes: int = option(0, "trainer processes, each a rank with its share of every batch (torchrun, DDP: "
                                  "NCCL on CUDA GPUs, gloo on the CPU); 0: one per CUDA GPU of the machine, else 1",
                             "Processes", range=(0, 256))
    quality_every: int = option(200, "steps between quality measurements (0: off; each ~0.25 s on CPU)",
                                range=(0, MAX_STEPS))
    max_image_mb: int = option(200, "upload size limit for own images, in MB", range=(1, 2000))

    # ---- derived values ---------------------------------------------------------------
    def resolved(self, preset: str | None = None, **chosen) -> "TrainConfig":
        """A copy with None hyper-parameters replaced by the GAN type's defaults, and by the fast
        preset's where `preset` (the preset 'auto' became on this device) is "fast" (core/gans.py).
        chosen: the values the plan chose for this run (its gan, precision, processes...), kept. A
        gan still "auto" takes DCGAN's defaults."""
        gan = gans.BY_NAME.get(chosen.get("gan", self.gan), gans.BY_NAME["dcgan"])
        defaults = {**gan.defaults, **(gan.fast_defaults if preset == "fast" else {})}
        values = {k: (defaults[k] if getattr(self, k) is None else getattr(self, k)) for k in defaults}
        if self.z_dim is None:
            values["z_dim"] = Z_DIM.get(preset, Z_DIM["default"])
        if values.get("ema", self.ema) is None:   # off unless the preset's defaults turn it on
            values["ema"] = 0.0
        if values.get("lr_decay_start", self.lr_decay_start) is None:   # constant unless the preset's decay
            values["lr_decay_start"] = 1.0
        if values.get("batch_size", self.batch_size) is None:
            values["batch_size"] = BATCH_SIZE
        return dataclasses.replace(self, **{**values, **chosen}, preset=preset or self.preset)

    # ---- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in values.items() if k not in RETIRED_FIELDS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"Unknown config field(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}.")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        return cls.from_dict(json.loads(text))

    def differences(self, other: "TrainConfig", ignore: tuple[str, ...] = ("steps", "processes")) -> list[str]:
        """Names of fields that differ, e.g. to refuse resuming a run under a changed config (its
        length may change, and so may its processes: a checkpoint continues with any number)."""
        return [f.name for f in fields(self) if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)]


def augments(cfg: TrainConfig, dataset_size: int, classes: int = 0) -> tuple[bool, str]:
    """Whether a run of cfg on dataset_size images shows D augmented images, and why, in words.
    classes: a class-conditional run's classes (D then judges each image with its class, so what it
    can learn by heart is each class's share of the set)."""
    if cfg.augment != "auto":
        return cfg.augment == "on", f"{cfg.augment}: chosen by the user"
    count = dataset_size // classes if classes else dataset_size
    small = count < AUGMENT_BELOW
    what = f"{count:,} images a class" if classes else f"{dataset_size:,} images"
    return small, f"{'on' if small else 'off'}: {what} is {'under' if small else 'at least'} {AUGMENT_BELOW:,}"


def whole_number(value, name: str, low: int, high: int | None) -> int:
    """A number from the page or a query string, checked here (clients can send anything).

    The page's number boxes have no minimum or maximum of their own, so that this message, which
    names the field, is the one a student sees. `high` None: no upper limit."""
    within = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
    if value is None or str(value).strip() == "":
        raise ConfigError(f"{name} is empty: type a whole number {within}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a whole number (got {value!r}).")
    if not math.isfinite(number) or number != int(number):
        raise ConfigError(f"{name} must be a whole number (got {value!r}).")
    number = int(number)
    if number < low or (high is not None and number > high):
        raise ConfigError(f"{name} must be {within} (got {number:,}).")
    return number


def spec(name: str) -> dict[str, Any]:
    """What TrainConfig declares about field `name`: help, label, choices and range (see `option`)."""
    return TrainConfig.__dataclass_fields__[name].metadata


def form_number(value, name: str) -> int | None:
    """Field `name` from the page or a query string: a whole number in its range, named by its label;
    None where the box is empty and the field may be left to its default (a None default: the batch).
    Gradio's number box sends an empty box as 0, which no such field takes."""
    if value in (None, "", 0) and TrainConfig.__dataclass_fields__[name].default is None:
        return None
    return whole_number(value, spec(name)["label"] or name, *spec(name)["range"])


def choose(name: str, value: str) -> None:
    """ConfigError naming field `name` by its label when `value` is not one of its choices."""
    choices, label = spec(name)["choices"], spec(name)["label"] or name
    if value not in choices:
        raise ConfigError(f"{label} '{value}' is not supported; choose one of: {', '.join(choices)}.")


# What the host may change while a run trains (the page's "Change while training"): each takes effect
# at the next step, and none changes the nets' shapes or the data. On XLA the rates are values the
# step reads, while a beta and n_critic (the critic updates the graph holds) are part of the step's
# graph, so a new value compiles it once (tests/xla/test_xla_facts.py).
LIVE_FIELDS = ("lr_g", "lr_d", "beta1", "beta2", "n_critic")
MAX_BETA = 0.9999   # Adam's slowest averages in use; past it 1 - beta is lost to float precision


# The seed's experiments as the page's comparison starts: a run again with one setting changed, the
# same seed (so the same fixed noise) and length, shown beside it.
COMPARISONS = {
    "precision": "the other precision (fp32 / bf16)",
    "gan": "the other GAN type (DCGAN / WGAN-GP; DCGAN for the relativistic)",
    "batch_size": "another batch size (32 / 256)",
    "lr_d": "D's learning rate x10",
}
# What a GAN type sets when left None (core/gans.py): a run of another type takes that type's own.
GAN_TYPE_DEFAULTS = ("lr_g", "lr_d", "beta1", "beta2", "n_critic", "ema", "lr_decay_start")


def comparison(plan, change: str) -> TrainConfig:
    """The config of a run (core.plan.Plan) as asked for, with the one change of COMPARISONS[change]."""
    resolved = plan.config
    if change == "precision":
        values = {"precision": "bf16" if resolved.precision == "fp32" else "fp32"}
    elif change == "gan":
        # The relativistic loss against DCGAN's: the same nets, the other loss.
        other = "dcgan" if resolved.gan in ("wgan-gp", "rpgan") else "wgan-gp"
        values = {"gan": other, **dict.fromkeys(GAN_TYPE_DEFAULTS)}
    elif change == "batch_size":
        values = {"batch_size": 256 if resolved.batch_size <= 64 else 32}
    elif change == "lr_d":
        values = {"lr_d": resolved.lr_d * 10}
    else:
        raise ConfigError(f"Compare: choose one of {', '.join(COMPARISONS.values())}.")
    return dataclasses.replace(plan.asked, **values)


def validate(resolved: TrainConfig, dataset_size: int | None = None, device_caps: dict | None = None) -> TrainConfig:
    """Refuse values that cannot work in a config whose defaults are resolved (core/plan.py
    make_plan, the one caller, resolves them); return it. dataset_size and device_caps: the
    dataset's and the device's checks, where the plan knows them."""
    for f in fields(TrainConfig):
        value, choices, limits = getattr(resolved, f.name), f.metadata["choices"], f.metadata["range"]
        if choices:
            choose(f.name, value)
        if limits:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{f.name} must be a whole number (got {value!r}).")
            whole_number(value, f.name, *limits)
    if resolved.dataset == "folder" and not resolved.data_path:
        raise ConfigError("Dataset 'folder' needs a folder or zip of images: set data_path (or upload a zip).")
    for name in ("lr_g", "lr_d"):
        lr = getattr(resolved, name)
        if not (0 < lr <= 1e-1):
            raise ConfigError(f"{name} {lr} is out of range; use a value in (0, 0.1], e.g. 2e-4.")
    for name in ("beta1", "beta2"):
        b = getattr(resolved, name)
        if not (0 <= b <= MAX_BETA):
            raise ConfigError(f"{name} {b} must be in [0, {MAX_BETA}]: nearer 1, Adam's averages of the "
                              "gradients never start (1 - beta rounds to 0) and the run cannot train.")
    if not (0 <= resolved.ema < 1):
        raise ConfigError(f"ema {resolved.ema} is out of range; use a value in [0, 1), e.g. 0.99 (0: off).")
    if not (0 <= resolved.lr_decay_start <= 1):
        raise ConfigError(f"lr_decay_start {resolved.lr_decay_start} is out of range; use a share of the run in "
                          "[0, 1], e.g. 0.5 (1: constant learning rates).")
    if resolved.gp_weight < 0:
        raise ConfigError("gp_weight must be 0 or more (10 is WGAN-GP's default).")
    if dataset_size is not None and resolved.batch_size > dataset_size:
        raise ConfigError(
            f"batch_size {resolved.batch_size} is larger than the dataset ({dataset_size} images); "
            f"use at most {dataset_size}.")
    if device_caps is not None:
        # The batch is split over the devices one process drives (SPMD), or over torchrun's processes (DDP).
        processes = device_caps.get("processes", 1)
        count = device_caps.get("devices", 1) * processes
        if resolved.batch_size % count:
            lower, higher = resolved.batch_size // count * count, (resolved.batch_size // count + 1) * count
            over = f"{count} processes" if processes > 1 else f"{count} devices"
            raise ConfigError(
                f"batch_size {resolved.batch_size} does not split evenly over {over} (each gets batch / {count}): "
                f"use a multiple of {count}, e.g. {higher if lower == 0 else lower} or {higher}.")
        reason = device_caps.get("precision_refused", {}).get(resolved.precision)
        if reason:
            raise ConfigError(f"Precision {resolved.precision} is not offered on {device_caps.get('name', 'this device')}: {reason}")
    return resolved
