"""Which network a run trains, and what a generator file describes: plain values, no torch.

The preset a run trains (and why), its width and training resolution, and GeneratorSpec, the
description stored beside a generator's weights (generator.json), with every check of that file.
The UI process reads these (the time estimate, a resume's config, the Sample tab's checks before
any work is queued) and never imports torch (issue 13: its memory); core.models builds the
networks from them and core.sample loads generators with them.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from core.devices import CPU_KINDS

# Network width per preset. "fast" is sized for a 2-core CPU at the data's resolution up to 32x32
# (chosen with lab/tune_defaults.py, lab/README.md); "dcgan64" is the seed's DCGAN (ngf = ndf = 64 at 64x64).
PRESET_WIDTH = {"fast": 32, "dcgan64": 64}

# Upload limits. The largest generator Blink trains (dcgan64, RGB 64x64) is ~3.6M parameters,
# 14 MB in fp32; these leave room for that and refuse anything that would exhaust memory.
MAX_WEIGHTS_MB = 64
MAX_META_BYTES = 256 * 1024
SPEC_LIMITS = {"z_dim": (1, 1024), "width": (1, 256), "classes": (0, 1000)}
MAX_CLASSES = SPEC_LIMITS["classes"][1]
SPEC_CHOICES = {"channels": (1, 3), "resolution": (28, 32, 64)}
MAX_CLASS_NAME = 255   # characters of a class name: a folder's name is at most 255 bytes on common file systems
# Of MAX_META_BYTES, what the class names may take: the rest of a description (spec, config with a
# long data path, step) is under 10 KB. Derived from the loader's cap, so that a dataset whose names
# fit (class_names_problem, checked before training) always saves a generator the loader takes.
CLASS_NAMES_BYTES = MAX_META_BYTES - 32 * 1024


def resolve_preset(preset: str, device_kind: str) -> tuple[str, str]:
    """The preset to use and why, for 'auto' and explicit choices alike."""
    if preset != "auto":
        return preset, "chosen by the user"
    if device_kind not in CPU_KINDS:   # a TPU or a CUDA GPU
        return "dcgan64", f"auto: a {device_kind.upper()} has the compute for the larger 64x64 network"
    # The network, not the loss: every GAN type trains this small convolutional pair at this preset.
    return "fast", f"auto: a small network at the data's size (at most 32x32) trains in minutes on a {device_kind.upper()}"


# The most the CPU preset trains at. At 32x32 a 64x64 colour folder trains several times the steps
# a second it does at 64x64 on a CPU, and shows the set's shapes in the time 64x64 shows blobs
# (lab/README.md, "Own images on a CPU: 64x64 against 32x32"); the page draws the grid in whole pixels.
FAST_MAX_RESOLUTION = 32


def model_resolution(preset: str, data_resolution: int) -> int:
    """dcgan64 trains at 64x64; fast at the data's own size up to 32x32 (MNIST's 28, CIFAR's 32;
    CelebA and a user's 64x64 images at 32). The data is resized to it."""
    return 64 if preset == "dcgan64" else min(data_resolution, FAST_MAX_RESOLUTION)


@dataclass(frozen=True)
class GeneratorSpec:
    """Everything needed to rebuild a generator: stored beside its weights."""
    z_dim: int
    channels: int
    resolution: int
    width: int
    classes: int = 0   # > 0: class-conditional, the label (one-hot) joins z at the first layer

    def to_dict(self) -> dict:
        return asdict(self)


# A grid narrower than this is a ribbon on a projector (three classes made one 3 tiles wide).
MIN_GRID_COLUMNS = 8


def grid_columns(classes: int, default: int = 8) -> int:
    """Columns of a sample grid: for a conditional generator (up to 16 classes) a whole number of
    columns a class, one for 8 or more classes, several for fewer so the grid stays wide; each
    column is still one class, as labels run through the classes along a row. Else `default`."""
    return classes * -(-MIN_GRID_COLUMNS // classes) if 0 < classes <= 16 else default


def check_class(generator, label: int) -> int:
    """label, if this generator (or its GeneratorSpec) can draw it; ValueError saying why not otherwise."""
    if not generator.classes:
        raise ValueError("This generator is unconditional (trained without labels): it has no class to ask for.")
    if not 0 <= int(label) < generator.classes:
        raise ValueError(f"{label} is not one of this generator's classes (0 to {generator.classes - 1}).")
    return int(label)


def class_names(meta: dict) -> list[str]:
    """What a generator calls its classes (class i is the i-th name), from a description read_spec
    has checked: [] where it names none (MNIST's digits are their indices; files before class names)."""
    return list(meta.get("class_names") or [])


def class_index(generator, label, names: list[str] = ()) -> int:
    """The class a label (text or number) asks for: one of the generator's class names, else a
    class index. A name wins, so a class folder named "7" is asked for as 7 whatever its index.
    ValueError saying which classes there are."""
    names, text = list(names), str(label).strip()
    if not generator.classes:
        return check_class(generator, 0)           # raises: it has no class to ask for
    if text in names:
        return names.index(text)
    if text.isdecimal() and int(text) < generator.classes:
        return int(text)
    last = generator.classes - 1
    if not names:
        raise ValueError(f"{text!r} is not one of this generator's classes (0 to {last}).")
    listed = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    raise ValueError(f"{text!r} is not one of this generator's classes: {listed} (or their indices, 0 to {last}).")


def quoted(name: str, limit: int = 40) -> str:
    """A name as a message quotes it: at most `limit` characters, then "...", and escaped as repr
    escapes it, < and > too (as \\x3c and \\x3e), so that no page drawing a message as HTML or
    Markdown (a Gradio error, a note) makes an element of it."""
    short = name if len(name) <= limit else name[:limit] + "..."
    return repr(short).replace("<", r"\x3c").replace(">", r"\x3e")


def class_names_bytes(names) -> int:
    """What the names add to a generator description as core/train.py writes it (JSON, indent 2,
    non-ASCII as \\u escapes: up to 6 bytes a character, 12 for an emoji)."""
    return len(json.dumps({"class_names": list(names)}, indent=2))


def class_names_problem(names) -> str | None:
    """Why a generator description could not name these classes, else None: the loader's one rule,
    which a dataset's class folders are held to before training too (core/data/own.py check_classes)."""
    if len(names) > MAX_CLASSES:
        return f"{len(names):,} classes are more than the {MAX_CLASSES:,} a generator file can hold"
    for name in names:
        if not 0 < len(name) <= MAX_CLASS_NAME:
            return f"the class name {quoted(name)} is {len(name):,} characters long; at most {MAX_CLASS_NAME} fit"
    size = class_names_bytes(names)
    if size > CLASS_NAMES_BYTES:
        widest = max(names, key=lambda name: len(json.dumps(name)))
        each = CLASS_NAMES_BYTES // len(names) - 8      # a name's bytes, less its quotes, indent, comma and newline
        return (f"the {len(names):,} class names would take {size / 1024:.0f} KB of the generator file, more than the "
                f"{CLASS_NAMES_BYTES // 1024} KB it keeps for them (the longest there: {quoted(widest)}); with "
                f"{len(names):,} classes, names of up to {each} plain letters (a-z, 0-9), {each // 6} other "
                f"letters or {each // 12} emoji fit")
    return None


class GeneratorFileError(ValueError):
    """A generator file that cannot be loaded; the message says why."""


def read_spec(meta_path: str) -> tuple[GeneratorSpec, dict]:
    """The generator description: a small JSON object with an integer spec in range."""
    try:
        size = os.path.getsize(meta_path)
    except OSError as exc:
        raise GeneratorFileError(f"The generator description cannot be read: {exc}")
    if size > MAX_META_BYTES:
        raise GeneratorFileError(f"The generator description is {size} bytes; a real one is under "
                                 f"{MAX_META_BYTES // 1024} KB.")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        raw = meta["spec"]
        values = {}
        for key in ("z_dim", "channels", "resolution", "width", "classes"):
            v = raw.get(key, 0) if key == "classes" else raw[key]   # files before conditional G have none
            # bool is an int subclass and 28.7 would silently truncate: both are refused.
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"spec.{key} must be a whole number, got {quoted(str(v), 20)}")
            values[key] = v
    except RecursionError:   # json decodes each nesting level by recursion: 100 KB of "[" is too deep
        raise GeneratorFileError(f"{os.path.basename(meta_path)} is not a generator description: its JSON is "
                                 "nested thousands of levels deep. Upload the generator.json saved with the "
                                 "generator.") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise GeneratorFileError(f"The generator description ({os.path.basename(meta_path)}) is not valid: {what}")
    for key, (low, high) in SPEC_LIMITS.items():
        if not low <= values[key] <= high:
            raise GeneratorFileError(f"The generator description has spec.{key}={values[key]}; "
                                     f"it must be between {low} and {high}.")
    for key, choices in SPEC_CHOICES.items():
        if values[key] not in choices:
            raise GeneratorFileError(f"The generator description has spec.{key}={values[key]}; "
                                     f"it must be one of {', '.join(map(str, choices))}.")
    names = meta.get("class_names") or []
    if names and not (isinstance(names, list) and len(names) == values["classes"]
                      and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)):
        raise GeneratorFileError(f"The generator description's class_names must be {values['classes']} different "
                                 f"names (text of 1 to {MAX_CLASS_NAME} characters), one per class, or none.")
    problem = class_names_problem(names)
    if problem:
        raise GeneratorFileError(f"The generator description's class_names cannot be loaded: {problem}.")
    return GeneratorSpec(**values), meta
