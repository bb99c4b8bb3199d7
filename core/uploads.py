"""Keeping a user's uploaded zip of images for the trainer.

Gradio stores uploads in a temporary folder that may be cleaned before a run (or its resume)
reads them. keep_upload() checks the zip with the same rules as training (size limit, no
entry escaping its folder, image entries counted) and copies it into the dataset cache under
a name derived from its content, so the same zip uploaded twice is stored once and finds its
decoded cache. The zip is never extracted: core.data reads the images straight from it.
"""
from __future__ import annotations

import os
import shutil

from core import data


def uploads_dir() -> str:
    return os.path.join(data.cache_dir(), "uploads")


def keep_upload(path: str, max_mb: int = data.DEFAULT_MAX_MB) -> dict:
    """Validate an uploaded zip and store it; returns dict(path, images, ignored, message).

    `path` in the result is what the UI puts in TrainConfig.data_path. Raises
    core.data.DatasetError (message for the student) for an unsafe, oversized or empty zip.
    """
    listing = data.list_images(path, max_mb)
    if listing.kind != "zip":
        raise data.DatasetError(f"{path} is a folder; upload a .zip file, or type the folder path instead.")
    if not listing.names:
        raise data.DatasetError(f"The zip {os.path.basename(path)} has no PNG/JPEG images "
                                f"({listing.ignored} other files). Zip .png, .jpg or .jpeg files.")
    os.makedirs(uploads_dir(), exist_ok=True)
    kept = os.path.join(uploads_dir(), f"{listing.fingerprint}.zip")
    if not os.path.exists(kept):
        tmp = f"{kept}.{os.getpid()}.tmp"
        shutil.copyfile(listing.path, tmp)
        os.replace(tmp, kept)        # atomic: a concurrent reader sees no half-copied zip
    return dict(path=kept, images=len(listing.names), ignored=listing.ignored,
                message=f"{len(listing.names)} images in the zip ({listing.ignored} other files ignored); "
                        f"unreadable images are skipped when training starts.")
