"""The dataset work a viewer triggers from the Train tab: checking an uploaded zip, previewing real images.

Both run through app.viewer_work.run, which may hand them to another process. So they are plain
module-level functions whose arguments and results are plain values (strings, dicts, numpy
arrays), and this module imports no Gradio: a worker that unpickles a reference to one of them
imports only this module and core. The Train tab turns the results into component updates.
"""
from __future__ import annotations

from core import data, uploads
from core.config import ConfigError, TrainConfig
from core.data import DatasetError
from core.images import grid_image


def check_data_path(dataset: str, data_path: str) -> str:
    """The resolved image folder or zip for 'My images' (what the trainer and preview then read),
    through core.data.guard_path; "" for the other datasets, which read no path."""
    if dataset != "folder":
        return ""     # only 'My images' reads a path; ignore anything typed for other datasets
    try:
        return data.guard_path(data_path)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from exc


def check_upload(path: str, may_evict: bool = True) -> dict:
    """Check an uploaded zip (size, entries, images) and keep it for training; may_evict: whether
    older uploads may go to make room (the host's upload), else it must fit.

    Returns dict(path, message) for a kept zip, or dict(refused=message) saying what to change."""
    try:
        kept = uploads.keep_upload(path, TrainConfig.max_image_mb, may_evict=may_evict)
    except DatasetError as exc:
        return {"refused": str(exc)}
    return {"path": data.upload_name(kept["path"]), "message": kept["message"]}


def preview(dataset: str, data_path: str):
    """What the chosen dataset holds, and a grid of its real images: (message, uint8 image or None)."""
    try:
        data_path = check_data_path(str(dataset), data_path)
    except ConfigError as exc:
        return f"⚠️ {exc}", None
    info = data.dataset_info(dataset, data_path)
    if not info["available"]:
        return f"⚠️ {info['message']}", None
    try:
        images = data.preview(dataset, data_path, n=32)
    except DatasetError as exc:
        return f"⚠️ {exc}", None
    return info["message"], grid_image(images, columns=8)
