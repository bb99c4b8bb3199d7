"""Where each dataset comes from: one Source row per dataset, carrying its own behaviour.

SOURCES is the table of every dataset a run can name. A row's fields say what the UI and the model
need (its label, native channels and resolution) and, for a torchvision set, where its files live
and where to get them; its methods how it loads, what dataset_info tells the UI, how a preview is
drawn. The row's class is the kind of source, so a new dataset of a known kind is one more row.

A torchvision set missing from the cache is downloaded by torchvision only when the machine is online
(BLINK_OFFLINE != 1 and a 2 s probe succeeds); offline it is refused at once with the folder and the
file names to put there. The rows and what they tell the UI need no torch; loading a set does.
"""
from __future__ import annotations

import gzip
import os
import pickle
import random
import socket
import tarfile
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.data import own
from core.data.cache import DatasetError, availability, cache_dir, cache_file, file_lock, read_meta
from core.data.own import APP_FOLDER, DEFAULT_MAX_MB, OWN_RESOLUTION, Listing
from core.files import write_atomic

if TYPE_CHECKING:
    from core.data.tensors import ImageSet

BUNDLED_MNIST = os.path.join(APP_FOLDER, "assets", "mnist_subset.npz")


def _verify_checksums() -> bool:
    """torchvision checks the md5 of CIFAR-10 and CelebA files. BLINK_VERIFY_CHECKSUMS=0 skips
    only that check (the real parsers still run): for re-packed copies and for the tests, which
    write small files in the real formats."""
    return os.environ.get("BLINK_VERIFY_CHECKSUMS", "1") != "0"


# ==== online / offline ========================================================================
_PROBES: dict[tuple[str, int], tuple[float, bool]] = {}


def network_allowed(host: tuple[str, int] = ("www.cs.toronto.edu", 443), timeout: float = 2.0) -> bool:
    """False at once when BLINK_OFFLINE=1; else a connect probe that gives up after `timeout` s.

    The probe runs in a daemon thread because DNS lookups ignore socket timeouts and can hang
    far past the timeout on a machine without network; the answer is remembered for 5 minutes.
    """
    if os.environ.get("BLINK_OFFLINE", "") == "1":
        return False
    now = time.monotonic()
    if host in _PROBES and now - _PROBES[host][0] < 300:
        return _PROBES[host][1]
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection(host, timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    _PROBES[host] = (now, bool(ok))
    return bool(ok)


@dataclass(frozen=True)
class Source:
    """One dataset a run can learn from: a row of SOURCES (see the module docstring)."""
    key: str                        # the name a config, the CLI and the UI use
    label: str                      # the page's choice, and the dataset's name in messages
    channels: int                   # native shape: the model adapts to it
    resolution: int

    def load(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
        """The whole set at its native size, decoded once and cached; DatasetError with advice.
        progress(done, total): called as images are decoded, where the loader can count them."""
        raise NotImplementedError

    def info(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB) -> dict:
        """What the UI shows before training, cheaply (see core.data.dataset_info)."""
        raise NotImplementedError

    def preview(self, data_path: str, n: int, rng: random.Random, max_mb: int = DEFAULT_MAX_MB) -> np.ndarray:
        """n images (n, C, H, W) float32 in [-1, 1]; a cached set reads only those n."""
        return self.load(data_path, max_mb).sample(n, rng)


@dataclass(frozen=True)
class BundledMnist(Source):
    """The MNIST subset shipped in assets/: there online or not, with its labels."""
    size: int
    path: str = BUNDLED_MNIST

    def load(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
        from core.data.tensors import ImageSet
        with np.load(self.path) as npz:
            images = npz["images"].copy()[:, None]      # (N, 1, 28, 28)
            labels = npz["labels"].astype(np.int64)
        return ImageSet(images, self.label, labels)

    def info(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB) -> dict:
        return availability(True, self.size, self.channels, self.resolution, f"{self.label}: always available.", True,
                            classes=DIGITS)


@dataclass(frozen=True)
class OwnImages(Source):
    """A student's folder or zip (data_path), read through the guards of own.py; 64x64, and one
    channel instead of `channels` when every image is grey."""

    def load(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
        return own.load_own(data_path, max_mb, progress)

    def info(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB) -> dict:
        return own.own_info(data_path, max_mb)

    def preview(self, data_path: str, n: int, rng: random.Random, max_mb: int = DEFAULT_MAX_MB) -> np.ndarray:
        return own.preview_own(data_path, n, rng, max_mb)


@dataclass(frozen=True)
class TorchvisionSource(Source):
    """A torchvision dataset: its files in torchvision's layout under cache_dir(), parsed by the
    torchvision class itself (its checks included). The subclasses are the file formats: which
    files count as present, how they are extracted and how the parsed set becomes tensors."""
    folder: str                     # relative to cache_dir(), torchvision's layout
    files: tuple[str, ...]          # what must be in `folder` (see has() for accepted variants)
    size: int                       # training images used
    url: str                        # where a student can fetch the files by hand
    download_mb: int
    host: tuple[str, int]           # probed before any download attempt
    tv_class: str                   # the torchvision.datasets class that reads the files
    classes: int = 10               # its labelled classes (0: its labels are not used)

    # ---- what a format changes
    def has(self, root: str, name: str) -> bool:
        """Whether file `name` of `files` is in the cache (a format may accept other variants)."""
        return os.path.isfile(os.path.join(root, self.folder, name))

    def variants_hint(self, root: str) -> str:
        """The accepted variants, in words, for the missing-files message."""
        return ""

    def found_in(self, data_path: str) -> bool:
        """Whether a folder the user named holds every file, ready to be adopted into the cache."""
        return False

    def adopt(self, root: str, data_path: str) -> None:
        """Copy the files from a folder the user named into the cache (formats that allow it)."""

    def stage(self, root: str) -> None:
        """Extract what torchvision's download step would extract, without touching the network."""

    def training_split(self) -> dict:
        """The torchvision arguments that select the training split."""
        return {"train": True}

    def dataset_class(self, verify: bool):
        """The torchvision class; verify=False: one whose md5s are None (check_integrity then only
        checks that the files exist), where the format has any (unverified)."""
        import torchvision.datasets as tvd
        base = getattr(tvd, self.tv_class)
        fields = {} if verify else self.unverified(base)
        return type(f"Unverified{base.__name__}", (base,), fields) if fields else base

    def unverified(self, base) -> dict:
        """The class attributes that give `base` no md5s: {} where torchvision checks none."""
        return {}

    def tensors(self, ds, root: str, progress=None) -> tuple:
        """The parsed training split -> uint8 images (N, C, H, W) and labels (or None), tensors or arrays.
        progress(done, total): where the images are decoded one by one (CelebA's JPEGs)."""
        raise NotImplementedError

    # ---- the same for every format
    def cache_path(self) -> str:
        return cache_file("processed", self.key)

    def missing(self, root: str) -> list[str]:
        """Files that are not in the cache (each accepted variant counts as present)."""
        return [name for name in self.files if not self.has(root, name)]

    def missing_message(self, root: str, missing: list[str], reason: str) -> str:
        where = os.path.join(root, self.folder)
        return (f"{self.label} is not in the dataset cache and {reason}. Put these files in {where}"
                f"{self.variants_hint(root)}: {', '.join(missing)}. Get them from {self.url}, or set "
                f"BLINK_DATA_DIR to a folder that has them. The bundled MNIST subset (dataset "
                f"'bundled-mnist') always works offline.")

    def offline_reason(self) -> str | None:
        """None when a download may be tried, else why not (for the message)."""
        if os.environ.get("BLINK_OFFLINE", "") == "1":
            return "this machine is set to offline (BLINK_OFFLINE=1)"
        if not network_allowed(self.host):
            return f"{self.host[0]} cannot be reached (no network?)"
        return None

    def download(self, root: str) -> None:
        """torchvision's own download, with a socket timeout so a stalled transfer fails, not hangs."""
        import torchvision.datasets as tvd
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(60)
        try:
            getattr(tvd, self.tv_class)(root, download=True, **self.training_split())
        except Exception as exc:   # network errors, Google Drive quotas, missing gdown: all need the same advice
            missing = self.missing(root) or list(self.files)
            raise DatasetError(self.missing_message(root, missing, f"downloading it failed ({exc})")) from exc
        finally:
            socket.setdefaulttimeout(previous)

    def open(self, root: str):
        """torchvision's dataset object (its parsers, its checks); md5 checks optional, see above."""
        try:
            return self.dataset_class(_verify_checksums())(root, download=False, **self.training_split())
        except RuntimeError as exc:      # torchvision's "not found or corrupted"
            raise DatasetError(
                f"{self.label} files in {os.path.join(root, self.folder)} failed torchvision's check ({exc}). "
                f"Delete that folder and download again from {self.url}.") from exc

    def load(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB, progress=None) -> ImageSet:
        from core.data.tensors import ImageSet, load_cached, save_cached
        root = cache_dir()
        path = self.cache_path()
        cached = load_cached(path, self.label)
        if cached is not None:
            return cached
        with file_lock(path):
            cached = load_cached(path, self.label)       # another replica may have just built it
            if cached is not None:
                return cached
            self.adopt(root, data_path)
            missing = self.missing(root)
            if missing:
                reason = self.offline_reason()
                if reason:
                    raise DatasetError(self.missing_message(root, missing, reason))
                self.download(root)
            try:
                self.stage(root)
                images, labels = self.tensors(self.open(root), root, progress)
            except DatasetError:
                raise
            except (OSError, EOFError, ValueError, TypeError, AssertionError, KeyError, zlib.error,
                    pickle.UnpicklingError, tarfile.TarError) as exc:
                # gzip/tar/pickle/IDX parsers fail in many ways on damaged files; the advice is the same.
                raise DatasetError(f"{self.label} files in {os.path.join(root, self.folder)} could not be read "
                                   f"({type(exc).__name__}: {exc}). Delete them and fetch them again from {self.url}.") from exc
            decoded = ImageSet(images, self.label, labels)
            try:
                save_cached(path, decoded)
            except OSError:              # full or read-only disk: train from memory, decode again next time
                return decoded
        cached = load_cached(path, self.label)
        return cached if cached is not None else decoded

    def info(self, data_path: str = "", max_mb: int = DEFAULT_MAX_MB) -> dict:
        meta = read_meta(self.cache_path())
        if meta and os.path.exists(self.cache_path()):
            return availability(True, meta["size"], meta["channels"], meta["resolution"],
                                f"{self.label}: {meta['size']:,} images, ready.", True, classes=self.classes,
                                class_names=tuple(meta.get("class_names") or ()))
        root = cache_dir()
        missing = self.missing(root)
        if missing and self.found_in(data_path):
            missing = []
        if not missing:
            return availability(True, self.size, self.channels, self.resolution,
                                f"{self.label}: files found; decoded once into the cache when training starts.",
                                classes=self.classes)
        reason = self.offline_reason()
        if reason:
            return availability(False, None, self.channels, self.resolution,
                                self.missing_message(root, missing, reason))
        return availability(True, self.size, self.channels, self.resolution,
                            f"{self.label} will be downloaded once (~{self.download_mb} MB) into {root} when training starts.",
                            classes=self.classes)


def _idx_file(folder: str, name: str) -> str | None:
    """The IDX file `name` in `folder`, as the .gz or its extracted version without .gz."""
    for variant in (name, name[:-3]):
        if os.path.isfile(os.path.join(folder, variant)):
            return variant
    return None


@dataclass(frozen=True)
class IdxSource(TorchvisionSource):
    """MNIST-style IDX files (.gz or extracted), with labels; a student may name a folder of them."""

    def has(self, root: str, name: str) -> bool:
        return _idx_file(os.path.join(root, self.folder), name) is not None

    def variants_hint(self, root: str) -> str:
        return " (the .gz files or their extracted versions without .gz)"

    def found_in(self, data_path: str) -> bool:
        return bool(data_path) and os.path.isdir(data_path) and \
            all(_idx_file(data_path, name) is not None for name in self.files)

    def adopt(self, root: str, data_path: str) -> None:
        if not data_path or not os.path.isdir(data_path):
            return
        folder = os.path.join(root, self.folder)
        for name in self.files:
            for variant in (name, name[:-3]):
                src = os.path.join(data_path, variant)
                dst = os.path.join(folder, variant)
                if os.path.isfile(src) and not os.path.exists(dst):
                    os.makedirs(folder, exist_ok=True)
                    with open(src, "rb") as f:
                        write_atomic(dst, f)

    def stage(self, root: str) -> None:
        folder = os.path.join(root, self.folder)
        for name in self.files:              # torchvision reads the extracted IDX files
            raw = os.path.join(folder, name[:-3])
            if not os.path.isfile(raw):
                with gzip.open(os.path.join(folder, name), "rb") as src:
                    write_atomic(raw, src)

    def tensors(self, ds, root: str, progress=None) -> tuple:
        return ds.data[:, None].contiguous(), ds.targets.long()


@dataclass(frozen=True)
class CifarSource(TorchvisionSource):
    """CIFAR's pickled batches, or the archive they come in (put in cache_dir() itself)."""
    archive: str = "cifar-10-python.tar.gz"

    def has(self, root: str, name: str) -> bool:
        return super().has(root, name) or os.path.isfile(os.path.join(root, self.archive))

    def variants_hint(self, root: str) -> str:
        return f" (or put {self.archive} in {root})"

    def stage(self, root: str) -> None:
        if any(not os.path.isfile(os.path.join(root, self.folder, name)) for name in self.files):
            from torchvision.datasets.utils import extract_archive
            extract_archive(os.path.join(root, self.archive), root)

    def unverified(self, base) -> dict:
        return dict(train_list=[[name, None] for name, _ in base.train_list],
                    test_list=[[name, None] for name, _ in base.test_list], meta=dict(base.meta, md5=None))

    def tensors(self, ds, root: str, progress=None) -> tuple:
        images = np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2))   # HWC -> CHW
        return images, np.asarray(ds.targets, dtype=np.int64)


@dataclass(frozen=True)
class CelebASource(TorchvisionSource):
    """CelebA's aligned faces (a folder of JPEGs, or its zip) and text files; no labels used.
    178x218 faces -> shorter side 64, centre crop 64x64 (the DCGAN recipe)."""
    images_folder: str = "img_align_celeba"

    def has(self, root: str, name: str) -> bool:
        if not name.startswith(self.images_folder):
            return super().has(root, name)
        folder = os.path.join(root, self.folder)
        return os.path.isdir(os.path.join(folder, self.images_folder)) or \
            os.path.isfile(os.path.join(folder, self.images_folder + ".zip"))

    def stage(self, root: str) -> None:
        folder = os.path.join(root, self.folder)
        if not os.path.isdir(os.path.join(folder, self.images_folder)):
            from torchvision.datasets.utils import extract_archive
            extract_archive(os.path.join(folder, self.images_folder + ".zip"), folder)

    def training_split(self) -> dict:
        return {"split": "train", "target_type": []}

    def unverified(self, base) -> dict:
        return dict(file_list=[(fid, None, name) for fid, _, name in base.file_list])

    def tensors(self, ds, root: str, progress=None) -> tuple:
        folder = os.path.join(root, self.folder, self.images_folder)
        paths = [os.path.join(folder, name) for name in ds.filename]
        arrays, _, bad = own.decode_many(paths, own.read_file, progress=progress)
        if bad:
            raise DatasetError(f"{len(bad)} {self.label} images could not be read (first: {bad[0]}). "
                               f"Extract {self.images_folder}.zip again into {os.path.join(root, self.folder)}.")
        return own.stack_images(arrays, grey=False), None

    def preview(self, data_path: str, n: int, rng: random.Random, max_mb: int = DEFAULT_MAX_MB) -> np.ndarray:
        """Before the set is decoded, only the n images shown are (decoding all takes minutes)."""
        if read_meta(self.cache_path()) is not None:
            return super().preview(data_path, n, rng, max_mb)
        folder = os.path.join(cache_dir(), self.folder, self.images_folder)
        if not os.path.isdir(folder):
            self.load(data_path, max_mb)          # raises the offline message or downloads
        names = sorted(f for f in os.listdir(folder) if f.lower().endswith(own.IMAGE_EXTENSIONS))
        return own.preview_listing(Listing(folder, "folder", names, 0, ""), n, rng)


_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
_CIFAR_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
                "test_batch", "batches.meta")
_CELEBA_TEXT = ("list_attr_celeba.txt", "identity_CelebA.txt", "list_bbox_celeba.txt",
                "list_landmarks_align_celeba.txt", "list_eval_partition.txt")

DIGITS = 10
BUNDLED = BundledMnist("bundled-mnist", "MNIST (bundled, offline)", 1, 28, size=10_000)
# Every dataset, in the order the page lists them: a new dataset is one row here, and its key in
# core/config.py DATASETS (tests/unit/test_shape.py holds the two together).
SOURCES: dict[str, Source] = {source.key: source for source in (
    BUNDLED,
    IdxSource("mnist", "MNIST (full, torchvision)", 1, 28, os.path.join("MNIST", "raw"), _MNIST_FILES, 60_000,
              "https://ossci-datasets.s3.amazonaws.com/mnist/", 12, ("ossci-datasets.s3.amazonaws.com", 443),
              tv_class="MNIST"),
    IdxSource("fashion-mnist", "Fashion-MNIST", 1, 28, os.path.join("FashionMNIST", "raw"), _MNIST_FILES, 60_000,
              "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/", 30,
              ("fashion-mnist.s3-website.eu-central-1.amazonaws.com", 80), tv_class="FashionMNIST"),
    CifarSource("cifar10", "CIFAR-10", 3, 32, "cifar-10-batches-py", _CIFAR_FILES, 50_000,
                "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (extract it here)", 163,
                ("www.cs.toronto.edu", 443), tv_class="CIFAR10"),
    CelebASource("celeba", "CelebA 64x64", 3, OWN_RESOLUTION, "celeba",
                 ("img_align_celeba/ (or img_align_celeba.zip)",) + _CELEBA_TEXT, 162_770,
                 "https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html (Align&Cropped images)", 1_400,
                 ("drive.google.com", 443), tv_class="CelebA", classes=0),
    OwnImages("folder", "My images (folder or zip)", 3, OWN_RESOLUTION),
)}


def source_of(dataset: str) -> Source:
    """The row of a dataset name; DatasetError naming the choices for an unknown one."""
    if dataset not in SOURCES:
        raise DatasetError(f"Unknown dataset '{dataset}'; choose one of: {', '.join(SOURCES)}.")
    return SOURCES[dataset]


def load_bundled_mnist() -> ImageSet:
    """The bundled subset, whatever the config (the quality classifier reads it too)."""
    return BUNDLED.load()
