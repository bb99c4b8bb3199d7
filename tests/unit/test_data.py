"""Datasets through the real parsers (torchvision's MNIST/CIFAR10/CelebA classes, PIL) on small
files the tests write in the real formats, plus the own-images and zip safety rules.

Every test runs with an empty private cache (BLINK_DATA_DIR) and BLINK_OFFLINE=1, so nothing
ever tries the network.
"""
from __future__ import annotations

import gzip
import os
import pickle
import shutil
import struct
import tarfile
import time
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from core import data
from core.data.sources import IdxSource
from core.images import to_model_range
from core.uploads import keep_upload
from tests.filehelpers import leftovers, png_bytes



# ---- writers for the real file formats -------------------------------------------------------
def write_idx(path, array: np.ndarray, gz: bool) -> None:
    """IDX (the MNIST format): magic 0x0000 0x08 (uint8) ndim, then big-endian dims, then bytes."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    if gz:
        payload = gzip.compress(payload)
    with open(path, "wb") as f:
        f.write(payload)


def write_mnist(folder, n_train=130, n_test=10, gz=True, seed=0):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n_train, dtype=np.uint8)
    ext = ".gz" if gz else ""
    write_idx(os.path.join(folder, "train-images-idx3-ubyte" + ext), images, gz)
    write_idx(os.path.join(folder, "train-labels-idx1-ubyte" + ext), labels, gz)
    write_idx(os.path.join(folder, "t10k-images-idx3-ubyte" + ext), images[:n_test], gz)
    write_idx(os.path.join(folder, "t10k-labels-idx1-ubyte" + ext), labels[:n_test], gz)
    return images, labels


def write_cifar(root, per_batch=20, seed=0) -> np.ndarray:
    """cifar-10-batches-py as the python pickles: rows of 3072 bytes, R plane then G then B."""
    folder = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(folder)
    rng = np.random.default_rng(seed)
    rows = []
    for name in ["data_batch_%d" % i for i in range(1, 6)] + ["test_batch"]:
        batch = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        if name != "test_batch":
            rows.append(batch)
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump({"data": batch, "labels": list(rng.integers(0, 10, per_batch)),
                         "batch_label": name}, f)
    with open(os.path.join(folder, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                     "horse", "ship", "truck"]}, f)
    return np.concatenate(rows)


def write_celeba(root, n=6):
    """img_align_celeba (178x218 JPEGs) and the five annotation files torchvision parses.

    Each face is blue in its central 178x178 square and red in the 20-pixel bands above and
    below, so a correct centre crop is blue.
    """
    folder = os.path.join(root, "celeba")
    images = os.path.join(folder, "img_align_celeba")
    os.makedirs(images)
    names = ["%06d.jpg" % (i + 1) for i in range(n)]
    picture = np.zeros((218, 178, 3), np.uint8)
    picture[:, :, 2] = 255
    picture[:20] = picture[-20:] = (255, 0, 0)
    for name in names:
        Image.fromarray(picture).save(os.path.join(images, name), quality=95)
    partition = [0] * (n - 2) + [1, 2]          # n-2 train, one valid, one test
    attrs = ["Attr%d" % i for i in range(40)]
    marks = ["lefteye_x", "lefteye_y", "righteye_x", "righteye_y", "nose_x", "nose_y",
             "leftmouth_x", "leftmouth_y", "rightmouth_x", "rightmouth_y"]
    files = {
        "list_eval_partition.txt": [f"{m} {p}" for m, p in zip(names, partition)],
        "identity_CelebA.txt": [f"{m} {i}" for i, m in enumerate(names)],
        "list_bbox_celeba.txt": [str(n), "image_id x_1 y_1 width height"] + [f"{m} 1 2 3 4" for m in names],
        "list_landmarks_align_celeba.txt": [str(n), " ".join(marks)] + [f"{m} " + " ".join(["50"] * 10) for m in names],
        "list_attr_celeba.txt": [str(n), " ".join(attrs)] + [f"{m} " + " ".join(["1", "-1"] * 20) for m in names],
    }
    for name, lines in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    return n - 2


def stripes(w, h) -> Image.Image:
    """Blue centre square, red outside it: a centre crop to a square must be all blue."""
    a = np.zeros((h, w, 3), np.uint8)
    a[:, :, 2] = 255
    s = min(w, h)
    x0, y0 = (w - s) // 2, (h - s) // 2
    mask = np.ones((h, w), bool)
    mask[y0:y0 + s, x0:x0 + s] = False
    a[mask] = (255, 0, 0)
    return Image.fromarray(a)


def make_folder(folder) -> dict:
    """Mixed sizes and modes, one corrupt and one truncated image, one text file."""
    os.makedirs(os.path.join(folder, "sub"))
    stripes(200, 100).save(os.path.join(folder, "wide.png"))                   # RGB, wide
    stripes(40, 90).convert("L").save(os.path.join(folder, "tall.jpg"))        # grey JPEG
    Image.new("RGBA", (64, 64), (0, 0, 0, 0)).save(os.path.join(folder, "clear.png"))   # transparent
    Image.new("P", (20, 20), 3).save(os.path.join(folder, "sub", "palette.png"))
    Image.fromarray(np.full((50, 50), 40000, np.uint16)).save(os.path.join(folder, "deep16.png"))
    with open(os.path.join(folder, "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    good = png_bytes(stripes(120, 80))
    with open(os.path.join(folder, "truncated.png"), "wb") as f:
        f.write(good[: len(good) // 2])
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("not an image")
    return dict(good=5, skipped=2, ignored=1)


# ---- torchvision datasets -----------------------------------------------------------------------
@pytest.mark.parametrize("dataset,folder,gz", [("mnist", "MNIST", True), ("fashion-mnist", "FashionMNIST", False)])
def test_idx_files_load_through_torchvision_and_are_cached(cache, dataset, folder, gz):
    images, labels = write_mnist(os.path.join(cache, folder, "raw"), gz=gz)
    loaded = data.load(dataset)
    assert loaded.images.shape == (130, 1, 28, 28) and loaded.images.dtype == torch.uint8
    assert torch.equal(loaded.images[:, 0], torch.from_numpy(images))
    assert torch.equal(loaded.labels, torch.from_numpy(labels.astype(np.int64)))
    assert os.path.exists(os.path.join(cache, "processed", f"{dataset}-v{data.PREP_VERSION}.pt"))
    # Second load: from the decoded cache, even with the raw files gone.
    for name in os.listdir(os.path.join(cache, folder, "raw")):
        os.remove(os.path.join(cache, folder, "raw", name))
    again = data.load(dataset)
    assert torch.equal(again.images, loaded.images)
    info = data.dataset_info(dataset)
    assert info["available"] and info["cached"] and info["size"] == 130 and info["channels"] == 1


def test_mnist_files_in_data_path_are_adopted_into_the_cache(cache, tmp_path):
    images, _ = write_mnist(tmp_path / "downloads", gz=True)
    assert data.dataset_info("mnist", str(tmp_path / "downloads"))["available"]
    loaded = data.load("mnist", str(tmp_path / "downloads"))
    assert torch.equal(loaded.images[:, 0], torch.from_numpy(images))
    assert os.path.isfile(os.path.join(cache, "MNIST", "raw", "train-images-idx3-ubyte.gz"))


def test_cifar10_pickles_load_through_torchvision(cache, monkeypatch):
    rows = write_cifar(cache)
    # torchvision checks the md5 of the real CIFAR files: our small files fail it, with advice.
    with pytest.raises(data.DatasetError, match="failed torchvision's check"):
        data.load("cifar10")
    # Skipping only the md5 comparison (documented switch), torchvision's parser does the rest.
    monkeypatch.setenv("BLINK_VERIFY_CHECKSUMS", "0")
    loaded = data.load("cifar10")
    assert loaded.images.shape == (100, 3, 32, 32) and loaded.images.dtype == torch.uint8
    assert torch.equal(loaded.images, torch.from_numpy(rows.reshape(-1, 3, 32, 32)))
    assert loaded.labels.shape == (100,)
    x = to_model_range(loaded.images)
    assert x.min() >= -1 and x.max() <= 1


def test_celeba_is_centre_cropped_to_64(cache, monkeypatch):
    monkeypatch.setenv("BLINK_VERIFY_CHECKSUMS", "0")
    n_train = write_celeba(cache)
    loaded = data.load("celeba")
    assert loaded.images.shape == (n_train, 3, 64, 64)
    mean = loaded.images.float().mean(dim=(0, 2, 3))
    assert mean[2] > 240 and mean[0] < 15, mean          # only the blue centre square is kept


def test_cifar10_archive_in_the_cache_is_found_extracted_and_loaded(cache, monkeypatch, tmp_path):
    rows = write_cifar(tmp_path)
    with tarfile.open(os.path.join(cache, "cifar-10-python.tar.gz"), "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    info = data.dataset_info("cifar10")
    assert info["available"] and not info["cached"] and "files found" in info["message"]
    assert (info["channels"], info["resolution"]) == (3, 32)
    monkeypatch.setenv("BLINK_VERIFY_CHECKSUMS", "0")
    loaded = data.load("cifar10")
    assert torch.equal(loaded.images, torch.from_numpy(rows.reshape(-1, 3, 32, 32)))


def test_celeba_zip_is_found_and_extracted_and_preview_decodes_only_what_it_shows(cache, monkeypatch):
    monkeypatch.setenv("BLINK_VERIFY_CHECKSUMS", "0")
    n_train = write_celeba(cache)
    preview = data.preview("celeba", n=3, seed=1)          # before decoding: only the 3 shown
    assert preview.shape == (3, 3, 64, 64) and preview.min() >= -1 and preview.max() <= 1
    assert not os.path.exists(os.path.join(cache, "processed"))
    images = os.path.join(cache, "celeba", "img_align_celeba")
    shutil.make_archive(images, "zip", os.path.join(cache, "celeba"), "img_align_celeba")
    shutil.rmtree(images)
    info = data.dataset_info("celeba")
    assert info["available"] and "files found" in info["message"] and (info["channels"], info["resolution"]) == (3, 64)
    assert data.load("celeba").images.shape == (n_train, 3, 64, 64)
    assert data.preview("celeba", n=3, seed=1).shape == (3, 3, 64, 64)


def test_a_new_dataset_in_a_known_format_is_one_row(cache):
    # KMNIST ships the same IDX files as MNIST, in torchvision's KMNIST/raw.
    kmnist = IdxSource("kmnist", "Kuzushiji-MNIST", 1, 28, os.path.join("KMNIST", "raw"),
                       data.SOURCES["mnist"].files, 60_000, "https://github.com/rois-codh/kmnist", 20,
                       ("codh.rois.ac.jp", 443), tv_class="KMNIST")
    missing = kmnist.info()
    assert not missing["available"] and os.path.join(cache, "KMNIST", "raw") in missing["message"]
    images, labels = write_mnist(os.path.join(cache, "KMNIST", "raw"), gz=True)
    loaded = kmnist.load()
    assert torch.equal(loaded.images[:, 0], torch.from_numpy(images)) and loaded.name == "Kuzushiji-MNIST"
    assert torch.equal(loaded.labels, torch.from_numpy(labels.astype(np.int64)))
    assert kmnist.info()["cached"]


@pytest.mark.parametrize("dataset,expect", [
    ("mnist", ["MNIST", "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]),
    ("fashion-mnist", ["FashionMNIST", "train-labels-idx1-ubyte.gz"]),
    ("cifar10", ["cifar-10-batches-py", "data_batch_1", "batches.meta", "cifar-10-python.tar.gz"]),
    ("celeba", ["celeba", "img_align_celeba", "list_eval_partition.txt"]),
])
def test_offline_missing_dataset_is_refused_at_once_with_file_names(cache, dataset, expect):
    t0 = time.perf_counter()
    with pytest.raises(data.DatasetError) as err:
        data.load(dataset)
    assert time.perf_counter() - t0 < 20.0   # at once: no download tried, no network waited for
    message = str(err.value)
    assert str(cache) in message and "BLINK_OFFLINE=1" in message and "bundled-mnist" in message
    for word in expect:
        assert word in message
    info = data.dataset_info(dataset)
    assert info["available"] is False and info["message"] == message


def test_bundled_mnist_works_offline(cache):
    loaded = data.load("bundled-mnist")
    assert loaded.images.shape == (10_000, 1, 28, 28)
    assert data.dataset_info("bundled-mnist")["available"]


def test_unknown_dataset_names_the_choices(cache):
    with pytest.raises(data.DatasetError, match="bundled-mnist"):
        data.load("imagenet")


# ---- the user's own images ----------------------------------------------------------------------
def test_image_folder_mixed_sizes_and_modes(cache, tmp_path):
    expected = make_folder(tmp_path / "mine")
    info = data.dataset_info("folder", str(tmp_path / "mine"))
    assert info["available"] and info["size"] == expected["good"] + expected["skipped"]
    loaded = data.load("folder", str(tmp_path / "mine"))
    assert loaded.images.shape == (expected["good"], 3, 64, 64) and loaded.images.dtype == torch.uint8
    assert loaded.skipped == expected["skipped"] and loaded.ignored == expected["ignored"]
    x = to_model_range(loaded.images)
    assert x.min() >= -1 and x.max() <= 1
    names = ["clear.png", "deep16.png", "sub/palette.png", "tall.jpg", "wide.png"]   # sorted load order
    by_name = dict(zip(names, loaded.images))
    assert (by_name["clear.png"] == 255).all()             # transparent -> white, not black
    assert by_name["wide.png"][2].float().mean() > 250 and by_name["wide.png"][0].float().mean() < 5
    assert abs(by_name["deep16.png"].float().mean() - 40000 / 65535 * 255) < 2   # 16-bit scaled, not clipped
    # Second load hits the decoded cache, and the UI sees it as ready.
    again = data.load("folder", str(tmp_path / "mine"))
    assert torch.equal(again.images, loaded.images) and again.skipped == expected["skipped"]
    assert data.dataset_info("folder", str(tmp_path / "mine"))["cached"]


def test_all_grey_folder_keeps_one_channel(cache, tmp_path):
    folder = tmp_path / "grey"
    folder.mkdir()
    for i, size in enumerate([(30, 30), (100, 60), (64, 64)]):
        Image.new("L", size, 20 * i).save(folder / f"{i}.png")
    loaded = data.load("folder", str(folder))
    assert loaded.images.shape == (3, 1, 64, 64)
    assert loaded.images[2].unique().tolist() == [40]


def test_own_images_still_load_on_a_full_cache_disk_and_leave_no_temp_file(cache, tmp_path, monkeypatch, mount):
    disk = mount("cache", "size=64k")            # the decoded images (147 KB) do not fit
    monkeypatch.setenv("BLINK_DATA_DIR", disk)
    folder = tmp_path / "mine"
    folder.mkdir()
    for i in range(12):
        stripes(64, 64).save(folder / f"{i}.png")
    loaded = data.load("folder", str(folder))
    assert loaded.images.shape == (12, 3, 64, 64)   # training goes on; only the cache is lost
    assert leftovers(disk) == []                    # a half-written cache would keep the disk full


def test_folder_without_usable_images_says_what_to_do(cache, tmp_path):
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(b"garbage")
    (folder / "b.gif").write_bytes(b"GIF89a")
    with pytest.raises(data.DatasetError, match=r"No usable images.*1 PNG/JPEG file\(s\) found, 1 unreadable, 1 other"):
        data.load("folder", str(folder))
    with pytest.raises(data.DatasetError, match="not found"):
        data.load("folder", str(tmp_path / "nowhere"))


def test_oversized_image_is_skipped_not_decoded(cache, tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    Image.new("1", (8000, 6000)).save(folder / "huge.png")       # 48 Mpx > MAX_PIXELS, tiny file
    Image.new("RGB", (10, 10), (1, 2, 3)).save(folder / "ok.png")
    loaded = data.load("folder", str(folder))
    assert len(loaded) == 1 and loaded.skipped == 1


def test_an_image_too_small_to_train_on_is_refused_by_name(cache, tmp_path):
    folder = tmp_path / "icons"
    (folder / "dots").mkdir(parents=True)
    Image.new("RGB", (10, 10), (1, 2, 3)).save(folder / "ok.png")
    Image.new("RGB", (1, 1), (200, 0, 0)).save(folder / "dots" / "pixel.png")
    refusal = (r"^dots/pixel\.png is 1x1 pixels: images need at least 8 pixels a side to train on\. Remove it "
               r"\(and any other image that small\) or replace it with a larger one\.$")
    with pytest.raises(data.DatasetError, match=refusal):
        data.load("folder", str(folder))
    # The preview before Start says it too, when it shows that image.
    with pytest.raises(data.DatasetError, match=refusal):
        data.preview("folder", str(folder), 2, seed=0)


def make_zip(path, entries: dict[str, bytes], compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, payload in entries.items():
            zf.writestr(name, payload)
    return str(path)


def test_zip_with_bad_entry_and_other_files(cache, tmp_path):
    good = png_bytes(stripes(90, 60))
    path = make_zip(tmp_path / "faces.zip", {
        "faces/a.png": good, "faces/b.JPG": png_bytes(stripes(60, 90).convert("RGB"), "JPEG"),
        "faces/c.png": b"\x89PNG broken", "readme.md": b"hi", "__MACOSX/faces/._a.png": b"\x00\x05",
    })
    info = data.dataset_info("folder", path)
    assert info["available"] and info["size"] == 3
    loaded = data.load("folder", path)
    assert loaded.images.shape == (2, 3, 64, 64)
    assert loaded.skipped == 1 and loaded.ignored == 2
    # Kept for the trainer under a content name; the same zip again finds the decoded cache.
    kept = keep_upload(path)
    assert kept["images"] == 3 and kept["ignored"] == 2 and os.path.isfile(kept["path"])
    assert data.dataset_info("folder", kept["path"])["cached"]


@pytest.mark.parametrize("evil", ["../escape.png", "a/../../escape.png", "/etc/escape.png", "C:/escape.png"])
def test_zip_slip_is_refused(cache, tmp_path, evil):
    path = make_zip(tmp_path / "evil.zip", {"ok.png": png_bytes(stripes(10, 10)), evil: b"x"})
    with pytest.raises(data.DatasetError, match="outside its folder"):
        data.load("folder", path)
    with pytest.raises(data.DatasetError, match="outside its folder"):
        keep_upload(path)
    assert not data.dataset_info("folder", path)["available"]


def test_too_large_zip_is_refused(cache, tmp_path):
    noise = np.random.default_rng(0).integers(0, 256, 1_200_000, dtype=np.uint8).tobytes()
    path = make_zip(tmp_path / "big.zip", {"noise.png": noise}, zipfile.ZIP_STORED)
    with pytest.raises(data.DatasetError, match=r"limit is 1 MB \(max_image_mb\)"):
        data.load("folder", path, max_mb=1)
    info = data.dataset_info("folder", path, max_mb=1)
    assert not info["available"] and "max_image_mb" in info["message"]


def test_zip_bomb_is_refused_by_uncompressed_size(cache, tmp_path):
    path = make_zip(tmp_path / "bomb.zip", {"bomb.png": bytes(6 * 2**20)})     # 6 MB of zeros -> ~6 kB
    assert os.path.getsize(path) < 2**20
    with pytest.raises(data.DatasetError, match="zip bomb"):
        data.load("folder", path, max_mb=1)


def test_not_a_zip(cache, tmp_path):
    path = tmp_path / "photo.png"
    path.write_bytes(png_bytes(stripes(10, 10)))
    with pytest.raises(data.DatasetError, match="not a zip"):
        data.load("folder", str(path))


# ---- preview -------------------------------------------------------------------------------------
def test_preview_shapes_range_and_seed(cache, tmp_path):
    p = data.preview("bundled-mnist", n=16, seed=3)
    assert p.shape == (16, 1, 28, 28) and p.dtype == np.float32
    assert p.min() >= -1 and p.max() <= 1 and p.min() < 0 < p.max()
    assert np.array_equal(p, data.preview("bundled-mnist", n=16, seed=3))
    assert not np.array_equal(p, data.preview("bundled-mnist", n=16, seed=4))
    make_folder(tmp_path / "mine")
    q = data.preview("folder", str(tmp_path / "mine"), n=64)     # uncached: decodes only what it shows
    assert q.shape == (5, 3, 64, 64) and q.min() >= -1 and q.max() <= 1
    assert not os.path.exists(os.path.join(cache, "own"))       # a preview does not build the cache
    with pytest.raises(data.DatasetError, match="BLINK_OFFLINE"):
        data.preview("cifar10")


# ---- the pipeline --------------------------------------------------------------------------------
def test_batch_stream_epochs_are_fixed_size_and_cover_every_image_once():
    images = torch.arange(100, dtype=torch.uint8).view(100, 1, 1, 1).expand(100, 1, 2, 2).contiguous()
    stream = data.BatchStream(images, 16, "cpu", seed=1)
    batches = [next(stream) for _ in range(stream.batches_per_epoch)]
    assert all(b.shape == (16, 1, 2, 2) for b in batches)
    values = torch.cat(batches)[:, 0, 0, 0].add(1).mul(127.5).round().long().tolist()
    assert len(set(values)) == len(values) == 96          # drop_last: 6 full batches, no image twice


def test_batch_stream_on_the_device_draws_its_indices_there_with_no_copy_or_sync():
    """keep_on_device (the CUDA road): every op of a batch, the epoch's shuffle included, runs on
    the stream's device (the uint8 -> float conversion is the one copy, in place), with no .item()
(a host sync on CUDA)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [t for t in (*args, *(kwargs or {}).values(), out) if isinstance(t, torch.Tensor)]
            self.seen.append((func.__name__, {t.device.type for t in tensors}))
            return out

    images = torch.randint(0, 256, (40, 1, 4, 4), dtype=torch.uint8)
    stream = data.BatchStream(images, 8, "cpu", keep_on_device=True, labels=torch.arange(40) % 10)
    with Ops() as ops:
        for _ in range(stream.batches_per_epoch + 1):     # a new epoch's shuffle included
            stream.next_with_labels()
    names = [name for name, _ in ops.seen]
    assert any(name.startswith("randperm") for name in names), names
    assert not [n for n in names if n.startswith(("copy_", "_local_scalar_dense", "item"))], names
    assert all(kinds <= {stream.images.device.type} for _, kinds in ops.seen), ops.seen
    assert stream._order.device == stream.images.device


def test_resize_uint8_matches_float_path():
    images = torch.randint(0, 256, (10, 3, 28, 28), dtype=torch.uint8)
    fast = data.resize(images, 64)
    slow = torch.nn.functional.interpolate(images.float(), size=(64, 64), mode="bilinear", antialias=True)
    assert fast.shape == (10, 3, 64, 64) and fast.dtype == torch.uint8
    assert (fast.int() - slow.round().int()).abs().max() <= 1


def test_damaged_idx_file_gives_advice(cache):
    write_mnist(os.path.join(cache, "MNIST", "raw"), gz=True)
    with open(os.path.join(cache, "MNIST", "raw", "train-images-idx3-ubyte.gz"), "wb") as f:
        f.write(b"\x1f\x8b\x08\x00 truncated gzip")
    with pytest.raises(data.DatasetError, match="could not be read.*Delete them and fetch them again"):
        data.load("mnist")
