"""The dataset cache: where it lives, the files each set is decoded into once, and what they load as.

Shared by every kind of dataset (sources.py, own.py), so it imports neither. Where the files live
(cache_dir(): BLINK_DATA_DIR, default ~/.cache/blink/datasets):
    processed/<dataset>-v<N>.pt (+ .json)    a torchvision set, decoded once, uint8
    own/<fingerprint>-v<N>.pt (+ .json)      a user's folder or zip, decoded once
The .pt holds the images (N, C, H, W) and labels; the .json its name, size and shape, so the UI
can say what is ready without opening the tensors.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
from filelock import FileLock

from core.images import to_model_range
from core.rundir import write_atomic

# Bump when preprocessing changes: old cache files are then ignored, never silently reused.
PREP_VERSION = 1


class DatasetError(ValueError):
    """A dataset that cannot be used; the message says what to do about it."""


@dataclass
class ImageSet:
    """A preprocessed dataset: uint8 images (N, C, H, W), optional labels, a display name."""
    images: torch.Tensor
    name: str
    labels: torch.Tensor | None = None
    skipped: int = 0          # unreadable image files left out (own images)
    ignored: int = 0          # files that are not PNG/JPEG, not used (own images)

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def channels(self) -> int:
        return self.images.shape[1]

    @property
    def resolution(self) -> int:
        return self.images.shape[-1]

    def sample(self, n: int, rng: random.Random) -> np.ndarray:
        """n of the images, float32 in [-1, 1]; only those n are read from a memory-mapped set."""
        idx = sorted(rng.sample(range(len(self.images)), min(n, len(self.images))))
        return to_model_range(self.images[torch.tensor(idx)]).numpy()


def availability(available: bool, size: int | None, channels: int | None, resolution: int | None,
                 message: str, cached: bool = False) -> dict:
    """What dataset_info reports for one dataset (every source answers in this shape)."""
    return dict(available=available, size=size, channels=channels, resolution=resolution,
                message=message, cached=cached)


def cache_dir() -> str:
    """The dataset cache folder (read at call time, so tests and users can point it elsewhere)."""
    return os.path.abspath(os.path.expanduser(
        os.environ.get("BLINK_DATA_DIR") or os.path.join("~", ".cache", "blink", "datasets")))


def cache_file(folder: str, stem: str) -> str:
    """The decoded-once file of one set: cache_dir()/folder/stem-v<PREP_VERSION>.pt."""
    return os.path.join(cache_dir(), folder, f"{stem}-v{PREP_VERSION}.pt")


def file_lock(path: str) -> FileLock:
    """One process prepares a dataset while the others (TPU replicas) wait, then all read it.
    filelock rather than fcntl: it locks on Windows too."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return FileLock(path + ".lock")


def save_cached(path: str, images: torch.Tensor, labels: torch.Tensor | None, meta: dict) -> None:
    """Both files written atomically: a reader never sees half a file. The tensors are saved
    straight into the temp file: a large dataset is not held in memory twice."""
    os.makedirs(os.path.dirname(path), exist_ok=True)

    def save_tensors(f) -> None:
        try:
            torch.save({"images": images.contiguous(), "labels": labels}, f)
        except RuntimeError as exc:
            # torch reports a write the disk refused (full) as its own RuntimeError, with the
            # OSError only as context; the callers handle a refused write as the OSError it is.
            if isinstance(exc.__context__, OSError):
                raise exc.__context__ from None
            raise

    write_atomic(path, save_tensors)
    meta = dict(meta, size=int(images.shape[0]), channels=int(images.shape[1]),
                resolution=int(images.shape[-1]), version=PREP_VERSION)
    write_atomic(path[:-3] + ".json", json.dumps(meta).encode())


def load_cached(path: str, name: str) -> ImageSet | None:
    """The cached set, memory-mapped (cheap: pages are read as batches touch them)."""
    meta = read_meta(path)
    if meta is None or not os.path.exists(path):
        return None
    try:
        state = torch.load(path, mmap=True, weights_only=True)
    except Exception:                # a damaged cache file is rebuilt, not fatal
        return None
    return ImageSet(state["images"], meta.get("name", name), state.get("labels"),
                    meta.get("skipped", 0), meta.get("ignored", 0))


def read_meta(path: str) -> dict | None:
    try:
        with open(path[:-3] + ".json") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if meta.get("version") == PREP_VERSION else None
