"""Keeping a user's uploaded zip of images for the trainer.

Gradio stores uploads in a temporary folder that may be cleaned before a run (or its resume)
reads them. keep_upload() checks the zip with the same rules as training (size limit, no
entry escaping its folder, image entries counted, class subfolders that can train) and copies
it into the dataset cache under a name derived from its content, so the same zip uploaded twice
is stored once and finds its decoded cache. The zip is never extracted: core.data reads the
images straight from it.

The folder is bounded: past BLINK_UPLOADS_MB (default 1 GB) the least recently uploaded zips
go, with their decoded caches, except the one just uploaded and any a run in the runs folder
was trained on (its Resume and the Sample tab's nearest images still read it).
"""
from __future__ import annotations

import glob
import os

from core import data
from core.data.cache import uploads_dir
from core.data.own import listed_classes
from core.rundir import disk_refusal, list_runs, write_atomic

UPLOADS_MB = 1024


def keep_upload(path: str, max_mb: int = data.DEFAULT_MAX_MB, may_evict: bool = True) -> dict:
    """Validate an uploaded zip and store it; returns dict(path, images, ignored, message).

    `path` in the result is what the UI puts in TrainConfig.data_path. may_evict: whether the
    least recently used zips may go to keep the folder under BLINK_UPLOADS_MB (the host's upload);
    else a zip that does not fit is refused, and nobody else's is deleted. Raises
    core.data.DatasetError (message for the student) for an unsafe, oversized or empty zip.
    """
    listing = data.list_images(path, max_mb)
    if listing.kind != "zip":
        raise data.DatasetError("That is a folder; upload a .zip file, or type the folder path instead.")
    if not listing.names:
        raise data.DatasetError(f"The zip {os.path.basename(path)} has no PNG/JPEG images "
                                f"({listing.ignored} other files). Zip .png, .jpg or .jpeg files.")
    listed_classes(listing)    # class folders that cannot train are refused now, not at Start
    os.makedirs(uploads_dir(), exist_ok=True)
    kept = os.path.join(uploads_dir(), f"{listing.fingerprint}.zip")
    if os.path.exists(kept):
        try:
            os.utime(kept)           # used again: the last to be evicted
        except OSError:              # a read-only cache still serves the zip
            pass
    else:
        if not may_evict:
            _refuse_unless_it_fits(os.path.getsize(listing.path))
        _store(listing.path, kept)
    if may_evict:
        evict_uploads(keep=kept)
    return dict(path=kept, images=len(listing.names), ignored=listing.ignored,
                message=f"{len(listing.names)} images in the zip ({listing.ignored} other files ignored); "
                        f"unreadable images are skipped when training starts.")


def _refuse_unless_it_fits(size: int) -> None:
    cap_mb = float(os.environ.get("BLINK_UPLOADS_MB", UPLOADS_MB))
    used = sum(e.stat().st_size for e in os.scandir(uploads_dir()) if e.name.endswith(".zip"))
    if used + size > cap_mb * 2**20:
        raise data.DatasetError(f"The server's uploads folder is full ({used / 2**20:.0f} of {cap_mb:.0f} MB), "
                                "and only the host's uploads may make room: ask the host to upload it.")


def _store(path: str, kept: str) -> None:
    """Copy atomically (a concurrent reader sees no half-copied zip); a full disk is said plainly."""
    try:
        with open(path, "rb") as f:
            write_atomic(kept, f)
    except OSError as exc:
        refusal = disk_refusal(exc, uploads_dir(), os.path.getsize(path), name="the dataset cache folder",
                               setting="BLINK_DATA_DIR")
        if refusal is None:
            raise
        raise data.DatasetError(f"{refusal}.") from exc


def evict_uploads(keep: str) -> list[str]:
    """Delete the least recently used zips while the folder is over BLINK_UPLOADS_MB; returns
    their paths. Never `keep` nor a zip a run in the runs folder was trained on."""
    cap_mb = float(os.environ.get("BLINK_UPLOADS_MB", UPLOADS_MB))
    in_use = {os.path.abspath(keep)} | _used_by_runs()
    zips = []
    for entry in os.scandir(uploads_dir()):
        if entry.name.endswith(".zip"):
            stat = entry.stat()
            zips.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in zips)
    evicted = []
    for _, size, path in sorted(zips):       # least recently used first
        if total <= cap_mb * 2**20:
            break
        if os.path.abspath(path) in in_use:
            continue
        fingerprint = os.path.basename(path)[:-len(".zip")]
        for file in [path, *glob.glob(os.path.join(data.cache_dir(), "own", f"{fingerprint}-v*"))]:
            try:
                os.remove(file)
            except OSError:   # gone already (another server sharing the cache)
                pass
        total -= size
        evicted.append(path)
    return evicted


def _used_by_runs() -> set[str]:
    used = set()
    for run in list_runs():
        try:
            used.add(os.path.abspath(run.read_config().data_path))
        except (OSError, ValueError, TypeError, KeyError):   # half written, or from another version
            pass
    return used
