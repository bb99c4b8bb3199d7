"""A decoded set as tensors: ImageSet, and its .pt cache file written once and memory-mapped after.
With stream.py the only modules here that import torch: the loaders import it when they build or read a set."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field

import numpy as np
import torch

from core.data.cache import PREP_VERSION, read_meta
from core.images import to_model_range
from core.files import write_atomic


@dataclass
class ImageSet:
    """A preprocessed dataset: uint8 images (N, C, H, W), optional labels, a display name. class_names:
    class i is class_names[i] where the set names them (a folder's subfolders), else []. Numpy arrays
    handed over become tensors sharing their memory."""
    images: torch.Tensor
    name: str
    labels: torch.Tensor | None = None
    skipped: int = 0          # unreadable image files left out (own images)
    ignored: int = 0          # files that are not PNG/JPEG, not used (own images)
    class_names: list[str] = field(default_factory=list)
    # Its decoded file in the cache ("" for a set kept nowhere): copies resized from it are kept beside it.
    cache_path: str = ""
    load_seconds: float = 0.0   # what decoding it (or reading its cache) took: core.data.load says

    def __post_init__(self):
        self.images = torch.as_tensor(self.images)
        if self.labels is not None:
            self.labels = torch.as_tensor(self.labels)

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


def save_cached(path: str, image_set: ImageSet) -> None:
    """Both files written atomically: a reader never sees half a file. The tensors are saved
    straight into the temp file: a large dataset is not held in memory twice."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images = image_set.images

    def save_tensors(f) -> None:
        try:
            torch.save({"images": images.contiguous(), "labels": image_set.labels}, f)
        except RuntimeError as exc:
            # torch reports a write the disk refused (full) as its own RuntimeError, with the
            # OSError only as context; the callers handle a refused write as the OSError it is.
            if isinstance(exc.__context__, OSError):
                raise exc.__context__ from None
            raise

    write_atomic(path, save_tensors)
    meta = {"name": image_set.name, "skipped": image_set.skipped, "ignored": image_set.ignored,
            "size": int(images.shape[0]), "channels": int(images.shape[1]),
            "resolution": int(images.shape[-1]), "class_names": list(image_set.class_names),
            "version": PREP_VERSION}
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
                    meta.get("skipped", 0), meta.get("ignored", 0), meta.get("class_names", []), path)
