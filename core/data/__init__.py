"""Datasets and the input pipeline.

A naive loader spent much of training time on data (lab/README.md, "Data: a naive loader against
the decoded cache"), so every dataset is decoded, resized and cropped once into one uint8 tensor
(N, C, H, W), cached (memory-mapped by the next load: replica processes share its pages), and the
trainer draws fixed-shape batches from it by index, converted to [-1, 1] on the device.

The modules: sources.py (SOURCES, a row per dataset), own.py (a student's own images and their
guards), cache.py, tensors.py (ImageSet), stream.py (resize, BatchStream). This package names them
all. The UI process never imports torch (issue 13): the names that need it are imported on first use.
"""
from __future__ import annotations

import importlib
import random
import time
from typing import TYPE_CHECKING

import numpy as np

from core.data.cache import PREP_VERSION, DatasetError, availability, cache_dir
from core.data.own import (DEFAULT_MAX_MB, MAX_FILES, MAX_IMAGE_BYTES, Listing, allowed_roots, decode_image,
                           guard_path, list_images, load_own, upload_name)
from core.data.sources import SOURCES, Source, load_bundled_mnist, network_allowed, source_of
from core.images import to_model_range

if TYPE_CHECKING:
    from core.data.tensors import ImageSet

__all__ = ["DEFAULT_MAX_MB", "MAX_FILES", "MAX_IMAGE_BYTES", "PREP_VERSION", "SOURCES", "BatchStream",
           "DatasetError", "ImageSet", "Listing", "Source", "allowed_roots", "cache_dir", "dataset_info",
           "decode_image", "guard_path", "list_images", "load", "load_bundled_mnist", "load_own",
           "network_allowed", "preview", "resize", "resized", "to_model_range", "upload_name"]
_TORCH_NAMES = {"ImageSet": "core.data.tensors", "BatchStream": "core.data.stream", "resize": "core.data.stream",
                "resized": "core.data.stream"}


def __getattr__(name: str):
    """data.ImageSet, data.BatchStream, data.resize, data.resized (PEP 562: called only for names not defined here)."""
    if name not in _TORCH_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_TORCH_NAMES[name]), name)


def load(dataset: str, data_path: str = "", max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
    """Load a dataset at its native size (its Source row's channels and resolution).

    data_path: for 'folder' the folder or zip of images; for mnist/fashion-mnist optionally a
    folder holding the four IDX files, copied into the cache. max_mb: the zip size limit
    (TrainConfig.max_image_mb). progress(done, total): called while images are decoded, where the
    loader decodes them one by one (own images, CelebA).
    """
    started = time.perf_counter()
    images = source_of(dataset).load(data_path, max_mb, progress)
    images.load_seconds = time.perf_counter() - started
    return images


def dataset_info(dataset: str, data_path: str = "", max_mb: int = DEFAULT_MAX_MB) -> dict:
    """What the UI shows before training: cheap (no decoding of whole sets, no torch_xla).

    Returns dict(available, size, channels, resolution, message, cached). `available` False
    means training would be refused; `message` then says what to do. For a dataset not yet
    downloaded this may wait up to 2 s once (the network probe; remembered for 5 minutes).
    """
    try:
        source = source_of(dataset)
    except DatasetError as exc:
        return availability(False, None, None, None, str(exc))
    return source.info(data_path, max_mb)


def preview(dataset: str, data_path: str = "", n: int = 64, seed: int = 0,
            max_mb: int = DEFAULT_MAX_MB) -> np.ndarray:
    """n real images (n, C, H, W) float32 in [-1, 1] at native size, for the UI.

    Cheap: cached sets are memory-mapped and only n images are read; an uncached folder, zip or
    CelebA decodes only the images it shows. Raises DatasetError (with advice) if unavailable.
    """
    return source_of(dataset).preview(data_path, n, random.Random(seed), max_mb)
