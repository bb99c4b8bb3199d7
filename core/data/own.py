"""A student's own images: a folder or zip of PNG/JPEG files, read safely and decoded once.

Everything a viewer can point the server at passes through here, so the safety rules live here:
guard_path, list_images (zip-slip, zip bombs, too many files, links never followed), and decoding
budgets. Decoded sets are cached under own/ by a fingerprint of the files; one class per subfolder.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import random
import stat
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.architecture import class_names_problem, quoted
from core.data.cache import PREP_VERSION, DatasetError, availability, cache_file, file_lock, read_meta, uploads_dir
from core.images import to_model_range

if TYPE_CHECKING:
    from core.data.tensors import ImageSet

# The app's own folder: one of the folders a viewer may name (its assets, the bundled MNIST).
APP_FOLDER = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN_RESOLUTION = 64                      # users' images and CelebA: shorter side -> 64, centre crop
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
# PIL only warns at 89 Mpx; 24 Mpx (a DSLR photo) is far beyond what a 64x64 GAN needs. Read from the header.
MAX_PIXELS = 24_000_000
# Smaller says nothing the model can learn (a one-pixel image trains as a flat square): refused by name.
MIN_IMAGE_SIDE = 8
MAX_IMAGE_BYTES = 32 * 2**20             # one image file, declared and actually read
MAX_FILES = 50_000                       # entries of a zip, or files walked in a folder
MAX_UNCOMPRESSED_RATIO = 4               # a zip's declared unpacked images (zipfile reads no more) to its limit
DEFAULT_MAX_MB = 200
# ~16 bytes per pixel at a decode's peak; every decode in this process shares one largest image's worth.
DECODE_BYTES_PER_PIXEL = 16
DECODE_BUDGET_BYTES = MAX_IMAGE_BYTES + MAX_PIXELS * DECODE_BYTES_PER_PIXEL
PREVIEW_SECONDS = 20.0                   # total decode time of one preview
PROGRESS_SECONDS = 0.25                  # between decode_many's progress calls: cheap, still live
# Fewer cannot show a conditional GAN a class (it would copy them), and so small a folder is likelier a stray.
MIN_CLASS_IMAGES = 10
_GREY_MODES = ("1", "L", "LA", "I", "I;16", "I;16L", "I;16B", "I;16N", "F")
UPLOAD_SCHEME = "upload:"
TOO_MANY_FILES = (f"That is more than {MAX_FILES:,} files; use at most {MAX_FILES:,} images "
                  f"(a few thousand are plenty for this GAN).")


# ==== the one guard for paths a viewer names ===================================================
def allowed_roots() -> list[str]:
    """Folders whose images the server may read for a viewer, resolved: the kept uploads, the app's
    folder and BLINK_DATA_ROOTS; not Gradio's upload folder, which every Gradio app shares."""
    roots = [uploads_dir(), APP_FOLDER, *os.environ.get("BLINK_DATA_ROOTS", "").split(os.pathsep)]
    return [os.path.realpath(os.path.expanduser(r)) for r in roots if r]


def upload_name(path: str) -> str:
    """What a page shows for a kept upload: `upload:NAME.zip`, not the server's path to it."""
    return UPLOAD_SCHEME + os.path.basename(path)


def upload_path(name: str) -> str | None:
    """The kept upload an `upload:NAME.zip` names (a file name only: no folder can be named), else None."""
    if not name.startswith(UPLOAD_SCHEME):
        return None
    file = name[len(UPLOAD_SCHEME):]
    if not re.fullmatch(r"[0-9A-Za-z_-]{1,128}\.zip", file):
        raise DatasetError("That upload name is not one this server gave: upload the zip again.")
    return os.path.join(uploads_dir(), file)


def guard_path(path: str) -> str:
    """The resolved path of an image folder or zip a viewer named, if the server may read it. Links are
    resolved once, here, and callers read only this path: a link cannot lead out. Messages name no path."""
    path = (path or "").strip()
    if not path:
        raise DatasetError("'My images' needs a folder or zip of images: upload a zip, or type a folder path.")
    real = os.path.realpath(os.path.expanduser(upload_path(path) or path))
    if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in allowed_roots()):
        raise DatasetError("That image folder is outside the folders this server allows (uploads, the app's "
                           "folder, or BLINK_DATA_ROOTS). Upload a zip of your images instead.")
    if not os.path.exists(real):
        raise DatasetError("That image folder or zip was not found on the server. Check the path, or upload a zip.")
    return real


class _DecodeBudget:
    """The allowance of decoding memory shared by every thread of this process."""

    def __init__(self, total: int):
        self.total, self.used = total, 0
        self._free = threading.Condition()

    @contextlib.contextmanager
    def hold(self, amount: int, timeout: float | None = None):
        with self._free:
            if not self._free.wait_for(lambda: self.used + amount <= self.total, timeout):
                raise TimeoutError("out of decode time")
            self.used += amount
        try:
            yield
        finally:
            with self._free:
                self.used -= amount
                self._free.notify_all()


_DECODING = _DecodeBudget(DECODE_BUDGET_BYTES)


# ==== listing a folder or zip =================================================================
def _parts(name: str) -> list[str]:
    return [part for part in name.replace("\\", "/").split("/") if part]


def _is_junk(name: str) -> bool:
    """Hidden and macOS folders and files (._x too) that carry image extensions but are not images."""
    return any(part.startswith(".") or part == "__MACOSX" for part in _parts(name))


def _escapes(name: str) -> bool:
    """True for zip entries that would land outside the extraction folder (zip-slip)."""
    norm = name.replace("\\", "/")
    return norm.startswith("/") or norm[1:2] == ":" or ".." in norm.split("/")


@dataclass
class Listing:
    """The image files of a folder or zip, before decoding."""
    path: str
    kind: str                      # "folder" | "zip"
    names: list[str]               # relative names, sorted
    ignored: int                   # files that are not PNG/JPEG
    fingerprint: str               # changes when any image file changes

    def reader(self):
        """A function name -> bytes (per thread: one open zip handle per reading thread)."""
        if self.kind == "folder":
            return lambda name: read_file(os.path.join(self.path, name))
        local = threading.local()

        def read(name: str) -> bytes:
            if not hasattr(local, "zf"):
                local.zf = zipfile.ZipFile(self.path)
            info = local.zf.getinfo(name)
            with local.zf.open(info) as f:
                return _read_capped(f, info.file_size)   # zipfile never returns more than an entry declares
        return read


def list_images(path: str, max_mb: int = DEFAULT_MAX_MB) -> Listing:
    """PNG/JPEG files of a folder (recursively) or zip; refuses unsafe or oversized zips."""
    if not path:
        raise DatasetError("No images given: choose a folder or upload a zip of PNG/JPEG images.")
    path = os.path.realpath(os.path.expanduser(path))
    if os.path.isdir(path):
        return _list_folder(path)
    if not os.path.isfile(path):
        raise DatasetError("That image folder or zip was not found. Check the path, or upload a zip of images.")
    return _list_zip(path, max_mb)


def _list_folder(path: str) -> Listing:
    names, ignored, h = [], 0, hashlib.sha1(f"folder:{path}:{PREP_VERSION}".encode())
    for dirpath, dirnames, filenames in os.walk(path):    # does not descend into linked folders
        dirnames[:] = sorted(d for d in dirnames if not _is_junk(d))
        if len(names) + ignored + len(filenames) > MAX_FILES:
            raise DatasetError(TOO_MANY_FILES)
        for filename in sorted(filenames):
            full = os.path.join(dirpath, filename)
            rel = os.path.relpath(full, path)
            # A linked file could lead anywhere on the server: links are never followed.
            if _is_junk(rel) or not filename.lower().endswith(IMAGE_EXTENSIONS) or os.path.islink(full) \
                    or not os.path.isfile(full):
                ignored += 1
                continue
            st = os.stat(full)
            names.append(rel)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return Listing(path, "folder", sorted(names), ignored, h.hexdigest()[:20])


def _list_zip(path: str, max_mb: int) -> Listing:
    size_mb = os.path.getsize(path) / 2**20
    if size_mb > max_mb:
        raise DatasetError(f"The zip is {size_mb:.0f} MB; the limit is {max_mb} MB (max_image_mb). "
                           f"Use fewer or smaller images (64x64 is enough for this GAN).")
    if not zipfile.is_zipfile(path):
        raise DatasetError(f"{os.path.basename(path)} is not a zip file nor a folder. Upload a .zip of PNG/JPEG images.")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DatasetError(f"The zip {os.path.basename(path)} is damaged. Create it again.") from exc
    if len(infos) > MAX_FILES:
        raise DatasetError(TOO_MANY_FILES)
    names, ignored, total = [], 0, 0
    h = hashlib.sha1(f"zip:{PREP_VERSION}".encode())
    for info in infos:
        if _escapes(info.filename):
            raise DatasetError(f"The zip contains a path that points outside its folder ({info.filename!r}); "
                               f"it was refused for safety. Zip the images with relative names only.")
        if info.is_dir():
            continue
        is_link = stat.S_ISLNK(info.external_attr >> 16)
        if is_link or _is_junk(info.filename) or not info.filename.lower().endswith(IMAGE_EXTENSIONS):
            ignored += 1
            continue
        names.append(info.filename)
        total += info.file_size
        # Each entry's CRC fingerprints the content unread: the same zip uploaded again finds its cache.
        h.update(f"{info.filename}\0{info.CRC}\0{info.file_size}\n".encode())
    if total > MAX_UNCOMPRESSED_RATIO * max_mb * 2**20:
        raise DatasetError(f"The zip's images unpack to {total / 2**20:.0f} MB, over {MAX_UNCOMPRESSED_RATIO}x the "
                           f"{max_mb} MB limit (a zip bomb?). Zip the PNG/JPEG files as they are.")
    return Listing(path, "zip", sorted(names), ignored, h.hexdigest()[:20])


# ==== classes: one per subfolder ================================================================
@dataclass
class Classes:
    """What a listing's folders say about classes (image_classes)."""
    names: list[str]          # the class subfolders, sorted: label i is names[i]; [] for no classes
    labels: list[int]         # each listed image's label, in the listing's order; [] for no classes
    loose: int = 0            # images beside subfolders of images: with any, the set has no classes


def image_classes(names: list[str]) -> Classes:
    """One class per subfolder, as torchvision's ImageFolder reads root/cat/*.png, classes sorted by name;
    a folder holding every image is looked through. Images loose in the top folder make the set
    unconditional, so nothing is dropped (own_info says why); one class is no class."""
    parts = [_parts(name) for name in names]
    while parts and all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) == 1:
        parts = [p[1:] for p in parts]
    folders = sorted({p[0] for p in parts if len(p) > 1})
    loose = sum(len(p) == 1 for p in parts)
    if loose or len(folders) < 2:
        return Classes([], [], loose if folders else 0)
    index = {folder: i for i, folder in enumerate(folders)}
    return Classes(folders, [index[p[0]] for p in parts])


def check_classes(classes: Classes, counts, readable: bool = False) -> None:
    """Refuse classes that cannot train: names a generator file could not hold, or a class with fewer
    than MIN_CLASS_IMAGES (readable: counted after decoding); at upload and at Start, before a run."""
    problem = class_names_problem(classes.names)
    if problem:
        raise DatasetError(f"Each subfolder is a class, named after it in the generator file, and here {problem}. "
                           f"Rename the subfolders shorter or use fewer of them, or put every image in one folder "
                           f"to train without classes.")
    small = [(name, int(n)) for name, n in zip(classes.names, counts) if n < MIN_CLASS_IMAGES]
    if small:
        kind = "readable images" if readable else "images"
        named = ", ".join(f"{quoted(name)} ({n} {kind})" for name, n in small[:5])
        more = f" and {len(small) - 5} more" if len(small) > 5 else ""
        raise DatasetError(f"Each subfolder is a class, and a class needs at least {MIN_CLASS_IMAGES} images; "
                           f"too few in {named}{more}. Add images there or remove those folders, or put every "
                           f"image in one folder to train without classes.")


def listed_classes(listing: Listing) -> Classes:
    """The listing's classes, checked on the listed files, before any decoding."""
    classes = image_classes(listing.names)
    if classes.names:
        check_classes(classes, np.bincount(classes.labels, minlength=len(classes.names)))
    return classes


# ==== reading and decoding within the budgets =================================================
def _read_capped(f, declared: int) -> bytes:
    """At most MAX_IMAGE_BYTES: refused on the size a file declares, unread, and on what is read (a file
    may grow after a check)."""
    if declared > MAX_IMAGE_BYTES or len(data := f.read(MAX_IMAGE_BYTES + 1)) > MAX_IMAGE_BYTES:
        raise ValueError("image file too large")
    return data


def read_file(path: str) -> bytes:
    """An image file's bytes; a link (swapped in after the listing, say) is refused, not followed."""
    with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
        return _read_capped(f, os.fstat(f.fileno()).st_size)


class ImageTooSmall(ValueError):
    def __init__(self, width: int, height: int):
        super().__init__(f"{width}x{height} pixels is under {MIN_IMAGE_SIDE} a side")
        self.width, self.height = width, height


def decode_image(data: bytes, size: int = OWN_RESOLUTION, timeout: float | None = None) -> tuple[np.ndarray, bool]:
    """PNG/JPEG bytes -> (uint8 (size, size) if grey else (size, size, 3), is_grey): shorter side resized
    to `size`, centre crop, EXIF rotation, transparency on white. Raises for anything unreadable, over
    the budgets, or still waiting for decode memory after `timeout`; ImageTooSmall under MIN_IMAGE_SIDE."""
    from PIL import Image, ImageOps
    if len(data) > MAX_IMAGE_BYTES:
        raise ValueError("image file too large")
    # formats=: no other decoder of PIL's ever parses a user's bytes.
    with Image.open(io.BytesIO(data), formats=("PNG", "JPEG", "MPO")) as img:
        w, h = img.size
        if w * h > MAX_PIXELS:
            raise ValueError(f"{w}x{h} pixels is over {MAX_PIXELS}")
        if min(w, h) < MIN_IMAGE_SIDE:
            raise ImageTooSmall(w, h)
        if img.format in ("JPEG", "MPO"):
            img.draft(img.mode, (size, size))        # JPEG decodes at 1/2..1/8 scale: much faster
        w, h = img.size
        with _DECODING.hold(len(data) + w * h * DECODE_BYTES_PER_PIXEL, timeout):
            img = ImageOps.exif_transpose(img)
            grey = img.mode in _GREY_MODES
            img = _flatten(img, grey)
            w, h = img.size
            s = min(w, h)
            box = ((w - s) / 2, (h - s) / 2, (w + s) / 2, (h + s) / 2)
            img = img.resize((size, size), Image.Resampling.BICUBIC, box=box)
            return np.asarray(img, dtype=np.uint8), grey


def _flatten(img, grey: bool):
    """Any PIL mode -> 'L' (grey) or 'RGB'; alpha composited on white, 16-bit grey scaled down."""
    from PIL import Image
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        arr = np.asarray(img).astype(np.float32)       # exact for 16-bit values; half the memory of float64
        top = 65535.0 if img.mode.startswith("I;16") or arr.max() > 255 else 255.0
        return Image.fromarray(np.clip(arr * (255.0 / top), 0, 255).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img.convert("L" if grey else "RGB")


def decode_many(names: list[str], read, size: int = OWN_RESOLUTION,
                 deadline: float | None = None, progress=None) -> tuple[list, list[bool], list[str]]:
    """(arrays, greys, unreadable names), decoded in threads (PIL releases the GIL); those not decoded by
    `deadline` (time.monotonic()) are unreadable. progress(done, total) a few times a second at most."""
    arrays, greys, bad = [], [], []
    next_report = 0.0

    def one(name: str):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None, name
        try:
            return decode_image(read(name), size, left), name
        except ImageTooSmall as exc:   # readable, and wrong for the set: the person can act on it
            raise DatasetError(f"{name} is {exc.width}x{exc.height} pixels: images need at least {MIN_IMAGE_SIDE} "
                               f"pixels a side to train on. Remove it (and any other image that small) or "
                               "replace it with a larger one.") from None
        except Exception:        # corrupt, truncated, encrypted, bomb, out of time: counted, never fatal
            return None, name

    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
        for start in range(0, len(names), 512):
            for result, name in pool.map(one, names[start:start + 512]):
                if result is None:
                    bad.append(name)
                else:
                    arrays.append(result[0])
                    greys.append(result[1])
                done = len(arrays) + len(bad)
                if progress is not None and (time.monotonic() >= next_report or done == len(names)):
                    next_report = time.monotonic() + PROGRESS_SECONDS
                    progress(done, len(names))
    return arrays, greys, bad


def stack_images(arrays: list[np.ndarray], grey: bool) -> np.ndarray:
    """HW / HWC arrays -> (N, C, H, W) uint8; grey images repeated to RGB when the set is colour."""
    if grey:
        return np.stack(arrays)[:, None]
    rgb = [a if a.ndim == 3 else np.repeat(a[:, :, None], 3, axis=2) for a in arrays]
    return np.ascontiguousarray(np.stack(rgb).transpose(0, 3, 1, 2))


# ==== the decoded set, its cache and its preview =============================================
def _nothing_usable(listing: Listing, bad: int) -> DatasetError:
    return DatasetError(
        f"No usable images in {os.path.basename(listing.path.rstrip(os.sep))}: {len(listing.names)} PNG/JPEG file(s) found, "
        f"{bad} unreadable, {listing.ignored} other file(s) ignored. "
        f"Use .png, .jpg or .jpeg images (any size, grey or colour).")


def _cache_path(listing: Listing) -> str:
    return cache_file("own", listing.fingerprint)


def _cached_meta(listing: Listing) -> dict | None:
    """The meta of the listing's decoded set; a set cached before subfolders gave classes has no
    class_names, and is decoded again."""
    meta = read_meta(_cache_path(listing))
    return meta if meta is not None and "class_names" in meta else None


def _load_cached(listing: Listing, title: str) -> ImageSet | None:
    from core.data.tensors import load_cached
    return load_cached(_cache_path(listing), title) if _cached_meta(listing) else None


def load_own(path: str, max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
    """A folder or zip of PNG/JPEG images -> 64x64 (RGB, or 1 channel if all are grey), cached, with
    labels for class subfolders. progress(done, total) while images are decoded."""
    from core.data.tensors import ImageSet, save_cached
    listing = list_images(path, max_mb)
    classes = listed_classes(listing)
    title = f"own images ({os.path.basename(listing.path.rstrip(os.sep)) or listing.path})"
    cache = _cache_path(listing)
    if (cached := _load_cached(listing, title)) is not None:
        return cached
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):   # a read-only cache only costs speed next time
            stack.enter_context(file_lock(cache))  # replicas wait for the first to decode
        if (cached := _load_cached(listing, title)) is not None:
            return cached
        arrays, greys, bad = decode_many(listing.names, listing.reader(), progress=progress)
        if not arrays:
            raise _nothing_usable(listing, len(bad))
        labels = None
        if classes.names:   # decode_many keeps the listing's order, less the unreadable
            unreadable = set(bad)
            labels = np.array([label for name, label in zip(listing.names, classes.labels) if name not in unreadable],
                              dtype=np.int64)
            check_classes(classes, np.bincount(labels, minlength=len(classes.names)), readable=True)
        decoded = ImageSet(stack_images(arrays, grey=all(greys)), title, labels, skipped=len(bad),
                           ignored=listing.ignored, class_names=classes.names)
        with contextlib.suppress(OSError):
            save_cached(cache, decoded)
            decoded.cache_path = cache
        return decoded


def own_info(path: str, max_mb: int = DEFAULT_MAX_MB) -> dict:
    """dataset_info for a folder or zip, without decoding: the cached set's, else what a listing found."""
    try:
        listing = list_images(path, max_mb)
        classes = listed_classes(listing)
    except DatasetError as exc:
        return availability(False, None, None, OWN_RESOLUTION, str(exc))
    classes_note, names = "", tuple(classes.names)      # no names with loose images
    if classes.loose:
        classes_note = (f" {classes.loose} image(s) sit in the top folder beside subfolders of images, so the set "
                        f"trains without classes; for one class per subfolder, move those into subfolders.")
    elif names:
        counts = np.bincount(classes.labels, minlength=len(names))
        # Bare names (quoted's text without its quotes): short, and never markup on the page's note.
        shown = ", ".join(f"{quoted(name)[1:-1]} {n}" for name, n in zip(names[:8], counts))
        more = f", and {len(names) - 8} more" if len(names) > 8 else ""
        classes_note = f" {len(names)} classes, one per subfolder ({shown}{more}): trains class-conditional."
    labelled = dict(classes=len(names), class_names=names)
    if meta := _cached_meta(listing):
        return availability(True, meta["size"], meta["channels"], meta["resolution"],
                            f"{meta['size']} images ready ({meta['skipped']} unreadable skipped, "
                            f"{meta['ignored']} other files ignored).{classes_note}", True, **labelled)
    if not listing.names:
        return availability(False, 0, None, OWN_RESOLUTION, str(_nothing_usable(listing, 0)))
    return availability(True, len(listing.names), None, OWN_RESOLUTION,
                        f"{len(listing.names)} PNG/JPEG files found ({listing.ignored} other files ignored); "
                        f"they are resized and centre-cropped to 64x64 once, unreadable ones are skipped."
                        f"{classes_note}", **labelled)


def preview_own(path: str, n: int, rng: random.Random, max_mb: int = DEFAULT_MAX_MB) -> np.ndarray:
    """n images of a folder or zip: from its cache if decoded already, else decoding only those n."""
    listing = list_images(path, max_mb)
    cached = _load_cached(listing, "")
    return preview_listing(listing, n, rng) if cached is None else cached.sample(n, rng)


def preview_listing(listing: Listing, n: int, rng: random.Random) -> np.ndarray:
    """n images of a listing, float32 in [-1, 1], decoding only those within PREVIEW_SECONDS:
    unreadable ones leave gaps rather than a search of a large (or hostile) set for readable ones."""
    import torch
    shown = rng.sample(listing.names, min(n, len(listing.names)))
    arrays, greys, _ = decode_many(shown, listing.reader(), deadline=time.monotonic() + PREVIEW_SECONDS)
    if not arrays:
        raise DatasetError(f"None of the {len(shown)} images picked for the preview could be read "
                           f"({listing.ignored} other files ignored). Use .png, .jpg or .jpeg images.")
    return to_model_range(torch.from_numpy(stack_images(arrays, all(greys)))).numpy()
