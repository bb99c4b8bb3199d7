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

DATASETS = ("bundled-mnist", "mnist", "fashion-mnist", "cifar10", "celeba", "folder")
GANS = ("dcgan", "wgan-gp", "hinge")
PRESETS = ("auto", "fast", "dcgan64")
PRECISIONS = ("fp32", "bf16", "fp16")
DEVICES = ("auto", "tpu", "xla-cpu", "cuda", "cpu")
CONDITIONAL = ("auto", "off")   # auto: class-conditional when the dataset has labels

# Each GAN type trains best with its paper's optimizer settings; a user who leaves the
# learning rates and betas at None gets these.
GAN_DEFAULTS: dict[str, dict[str, Any]] = {
    # Radford et al. 2015 (the seed's DCGAN): Adam lr 2e-4, betas (0.5, 0.999), one D step per G step.
    "dcgan": dict(lr_g=2e-4, lr_d=2e-4, beta1=0.5, beta2=0.999, n_critic=1),
    # Gulrajani et al. 2017: Adam(0, 0.9), 5 critic steps per generator step, lambda 10.
    "wgan-gp": dict(lr_g=1e-4, lr_d=1e-4, beta1=0.0, beta2=0.9, n_critic=5),
    # Miyato et al. 2018 (SNGAN, hinge): Adam 2e-4, betas (0.0, 0.9), n_dis 1 for the DCGAN-sized nets.
    "hinge": dict(lr_g=2e-4, lr_d=2e-4, beta1=0.0, beta2=0.9, n_critic=1),
}


# The CPU preset's own values, measured (bench/README.md, "Conditional"): the small native-size
# DCGAN at batch 128 learns fastest per second with lr 2e-3; at the paper's 2e-4 it needs ~3x the
# steps. The seed's 64x64 DCGAN keeps the paper's values: nothing here measured it otherwise.
FAST_PRESET_DEFAULTS: dict[str, dict[str, Any]] = {
    "dcgan": dict(lr_g=2e-3, lr_d=2e-3),
}
# Latent size: the seed's 100 for its 64x64 DCGAN; 16 for the CPU preset, where the conditional
# GAN reached recognisable digits in ~600 steps against ~1,000 at 100 (bench/README.md, "Conditional").
Z_DIM = {"default": 100, "fast": 16}


class ConfigError(ValueError):
    """A config value the user must change; the message says which and how."""


@dataclass
class TrainConfig:
    dataset: str = "bundled-mnist"      # one of DATASETS
    data_path: str = ""                 # folder or zip of images, for dataset="folder"
    gan: str = "dcgan"                  # loss family: dcgan (non-saturating), wgan-gp, hinge
    preset: str = "auto"                # network size: fast (CPU, native size), dcgan64 (seed's 64x64)
    conditional: str = "auto"           # auto: a class-conditional GAN when the dataset has labels; off
    batch_size: int = 128               # per replica (per TPU core); the seed's 128, also fastest on CPU
    precision: str = "fp32"             # fp32 | bf16 | fp16
    device: str = "auto"                # auto | tpu | xla-cpu | cuda | cpu
    steps: int = 2000                   # generator updates
    lr_g: float | None = None           # None: the GAN type's default (GAN_DEFAULTS, FAST_PRESET_DEFAULTS)
    lr_d: float | None = None
    beta1: float | None = None
    beta2: float | None = None
    n_critic: int | None = None         # D steps per G step
    gp_weight: float = 10.0             # WGAN-GP penalty weight (lambda)
    z_dim: int | None = None            # None: the seed's 100, or 16 for the fast preset (Z_DIM)
    seed: int = 0
    log_every: int = 25                 # steps between loss points / status updates
    grid_every: int = 100               # steps between fixed-noise grids
    checkpoint_every: int = 500         # steps between checkpoints (also at stop and end)
    quality_every: int = 200            # steps between quality measurements (0: off; each ~0.25 s on CPU)
    num_cores: int = 0                  # TPU replicas; 0 = all cores present
    max_image_mb: int = 200             # upload size limit for own images

    # ---- derived values ---------------------------------------------------------------
    def resolved(self, preset: str | None = None) -> "TrainConfig":
        """A copy with None hyper-parameters replaced by the GAN type's defaults, and by the fast
        preset's where `preset` (the preset 'auto' became on this device) is "fast"."""
        defaults = dict(GAN_DEFAULTS.get(self.gan, GAN_DEFAULTS["dcgan"]))
        if preset == "fast":
            defaults.update(FAST_PRESET_DEFAULTS.get(self.gan, {}))
        values = {k: (defaults[k] if getattr(self, k) is None else getattr(self, k)) for k in defaults}
        if self.z_dim is None:
            values["z_dim"] = Z_DIM.get(preset, Z_DIM["default"])
        return dataclasses.replace(self, **values)

    # ---- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"Unknown config field(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}.")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        return cls.from_dict(json.loads(text))

    def differences(self, other: "TrainConfig", ignore: tuple[str, ...] = ("steps",)) -> list[str]:
        """Names of fields that differ, e.g. to refuse resuming a run under a changed config."""
        return [f.name for f in fields(self) if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)]


def whole_number(value, name: str, low: int, high: int) -> int:
    """A number from the page or a query string, checked here (clients can send anything).

    The page's number boxes have no minimum or maximum of their own, so that this message, which
    names the field, is the one a student sees."""
    if value is None or str(value).strip() == "":
        raise ConfigError(f"{name} is empty: type a whole number from {low:,} to {high:,}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a whole number (got {value!r}).")
    if not math.isfinite(number) or number != int(number):
        raise ConfigError(f"{name} must be a whole number (got {value!r}).")
    number = int(number)
    if not low <= number <= high:
        raise ConfigError(f"{name} must be between {low:,} and {high:,} (got {number:,}).")
    return number


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} '{value}' is not supported; choose one of: {', '.join(choices)}.")


def validate(cfg: TrainConfig, dataset_size: int | None = None, device_caps: dict | None = None,
             preset: str | None = None) -> TrainConfig:
    """Refuse values that cannot work; return the config with defaults resolved (for `preset`,
    the preset that will run, when the caller knows it).

    dataset_size and device_caps are optional so the config can be checked in layers: the
    static checks always, the dataset and device checks when the caller knows them (the UI
    knows both before it starts a process).
    """
    _choice("Dataset", cfg.dataset, DATASETS)
    _choice("GAN type", cfg.gan, GANS)
    _choice("Model preset", cfg.preset, PRESETS)
    _choice("Precision", cfg.precision, PRECISIONS)
    _choice("Device", cfg.device, DEVICES)
    _choice("Class-conditional", cfg.conditional, CONDITIONAL)
    ints = dict(batch_size=cfg.batch_size, steps=cfg.steps, log_every=cfg.log_every, grid_every=cfg.grid_every,
                checkpoint_every=cfg.checkpoint_every, z_dim=cfg.resolved(preset).z_dim)
    for name, value in ints.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a whole number of at least 1 (got {value!r}).")
    if cfg.batch_size > 4096:
        raise ConfigError(f"batch_size {cfg.batch_size} is too large; use at most 4096 (64-256 is typical).")
    if cfg.steps > 1_000_000:
        raise ConfigError(f"steps {cfg.steps} is too many for a demo; use at most 1,000,000.")
    if not 1 <= cfg.max_image_mb <= 2000:
        raise ConfigError(f"max_image_mb {cfg.max_image_mb} must be between 1 and 2000.")
    if cfg.quality_every < 0 or cfg.num_cores < 0:
        raise ConfigError("quality_every and num_cores must be 0 or more.")
    if cfg.dataset == "folder" and not cfg.data_path:
        raise ConfigError("Dataset 'folder' needs a folder or zip of images: set data_path (or upload a zip).")
    resolved = cfg.resolved(preset)
    for name in ("lr_g", "lr_d"):
        lr = getattr(resolved, name)
        if not (0 < lr <= 1e-1):
            raise ConfigError(f"{name} {lr} is out of range; use a value in (0, 0.1], e.g. 2e-4.")
    for name in ("beta1", "beta2"):
        b = getattr(resolved, name)
        if not (0 <= b < 1):
            raise ConfigError(f"{name} {b} must be in [0, 1).")
    if not (1 <= resolved.n_critic <= 20):
        raise ConfigError(f"n_critic {resolved.n_critic} must be between 1 and 20 (5 is WGAN-GP's default).")
    if resolved.gp_weight < 0:
        raise ConfigError("gp_weight must be 0 or more (10 is WGAN-GP's default).")
    if dataset_size is not None and cfg.batch_size > dataset_size:
        raise ConfigError(
            f"batch_size {cfg.batch_size} is larger than the dataset ({dataset_size} images); "
            f"use at most {dataset_size}.")
    if device_caps is not None:
        reason = device_caps.get("precision_refused", {}).get(cfg.precision)
        if reason:
            raise ConfigError(f"Precision {cfg.precision} is not offered on {device_caps.get('name', 'this device')}: {reason}")
    return resolved
