"""The dataset cache: where it lives and the files each set is decoded into once.

Shared by every kind of dataset (sources.py, own.py), so it imports neither. Where the files live
(cache_dir(): BLINK_DATA_DIR, default ~/.cache/blink/datasets):
    processed/<dataset>-v<N>.pt (+ .json)    a torchvision set, decoded once, uint8
    own/<fingerprint>-v<N>.pt (+ .json)      a user's folder or zip, decoded once
    <that file's stem>-<R>px.pt (+ .json)    that set resized to R for a model (stream.resized)
The .pt holds the images (N, C, H, W) and labels (written and read by tensors.py); the .json its
name, size, shape and class names, so the UI can say what is ready without opening the tensors, nor torch.
"""
from __future__ import annotations

import json
import os

from filelock import FileLock

# Bump when preprocessing changes: old cache files are then ignored, never silently reused.
PREP_VERSION = 1


class DatasetError(ValueError):
    """A dataset that cannot be used; the message says what to do about it."""


def availability(available: bool, size: int | None, channels: int | None, resolution: int | None,
                 message: str, cached: bool = False, classes: int | None = None,
                 class_names: tuple[str, ...] = ()) -> dict:
    """What dataset_info reports for one dataset (every source answers in this shape). classes: its
    labelled classes (0: none), None where not known before decoding; class_names where it names them."""
    return dict(available=available, size=size, channels=channels, resolution=resolution,
                message=message, cached=cached, classes=classes, class_names=tuple(class_names))


def cache_dir() -> str:
    """The dataset cache folder (read at call time, so tests and users can point it elsewhere)."""
    return os.path.abspath(os.path.expanduser(
        os.environ.get("BLINK_DATA_DIR") or os.path.join("~", ".cache", "blink", "datasets")))


def uploads_dir() -> str:
    """Where uploaded zips are kept (core/uploads.py), and so a folder 'My images' may read."""
    return os.path.join(cache_dir(), "uploads")


def cache_file(folder: str, stem: str) -> str:
    """The decoded-once file of one set: cache_dir()/folder/stem-v<PREP_VERSION>.pt."""
    return os.path.join(cache_dir(), folder, f"{stem}-v{PREP_VERSION}.pt")


def file_lock(path: str) -> FileLock:
    """One process prepares a dataset while the others (TPU replicas) wait, then all read it.
    filelock rather than fcntl: it locks on Windows too."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return FileLock(path + ".lock")


def read_meta(path: str) -> dict | None:
    try:
        with open(path[:-3] + ".json") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if meta.get("version") == PREP_VERSION else None
