"""A run's data prepared on the CPU before any GPU call (a ZeroGPU run's chunks): the resized set
kept in the cache, the progress of decoding and resizing, core.train.prepare_data, and a chunk's
clock that starts at its first step.

Real images made here, the real loaders and cache (a private BLINK_DATA_DIR), one real short run.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import torch
from PIL import Image

from core import data
from core.config import TrainConfig
from core.data import own, stream
from core.rundir import RunDir
from core.train import Chunk, prepare_data, train
from tests.clihelpers import run_cli
from tests.filehelpers import cpu_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = 40


@pytest.fixture
def folder(tmp_path):
    """IMAGES small noisy PNGs in two class folders, in sizes that need a crop and a resize."""
    rng = np.random.default_rng(0)
    for i in range(IMAGES):
        sub = tmp_path / "mine" / ("cats" if i % 2 else "dogs")
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(sub / f"{i}.png")
    return str(tmp_path / "mine")


def refuse(*args, **kwargs):
    raise AssertionError("called again: the cache should have answered")


def monotonic(calls) -> bool:
    return all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


def test_the_resized_set_is_kept_beside_the_decoded_one_and_read_from_there(cache, folder, monkeypatch):
    decoded = data.load("folder", folder)
    expected = data.resize(decoded.images, 32)
    first = data.resized(decoded, 32)
    assert torch.equal(first, expected) and first.dtype == torch.uint8   # what trains is unchanged
    path = decoded.cache_path[:-3] + "-32px.pt"
    assert os.path.isfile(path)
    written = os.stat(path).st_mtime_ns
    # The next session (a ZeroGPU chunk): neither decoded nor resized again, the file not rewritten.
    monkeypatch.setattr(own, "decode_many", refuse)
    monkeypatch.setattr(stream, "resize", refuse)
    again = data.load("folder", folder)
    second = data.resized(again, 32)
    assert torch.equal(second, expected) and os.stat(path).st_mtime_ns == written
    # At the data's own size nothing more is written: the decoded set is what trains.
    files = sorted(os.listdir(os.path.dirname(path)))
    assert data.resized(again, 64) is again.images
    assert sorted(os.listdir(os.path.dirname(path))) == files


def test_progress_counts_the_images_decoded_then_resized(cache, folder):
    calls = []
    decoded = data.load("folder", folder, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (IMAGES, IMAGES) and monotonic(calls)
    assert {total for _, total in calls} == {IMAGES}
    calls.clear()
    data.resized(decoded, 32, lambda done, total: calls.append((done, total)))
    assert calls[-1] == (IMAGES, IMAGES) and monotonic(calls)
    # A large set reports once per chunk of images it resizes.
    calls.clear()
    data.resize(torch.zeros(5000, 1, 8, 8, dtype=torch.uint8), 4, lambda done, total: calls.append((done, total)))
    assert calls == [(0, 5000), (2048, 5000), (4096, 5000), (5000, 5000)]


def test_prepare_data_says_how_far_it_is_and_leaves_the_trainer_its_files(cache, folder, tmp_path, monkeypatch):
    config = TrainConfig(dataset="folder", data_path=folder, preset="fast", batch_size=16)
    run = RunDir.create(cpu_plan(config), str(tmp_path / "runs"))
    written = []
    write_status = RunDir.write_status

    def recorded(self, state, message="", **fields):
        written.append((state, message, fields.get("pid")))
        write_status(self, state, message, **fields)
    monkeypatch.setattr(RunDir, "write_status", recorded)
    assert prepare_data(run.path) is True
    preparing = [(message, pid) for state, message, pid in written if state == "preparing"]
    assert preparing[-1] == (f"Preparing the dataset: {IMAGES} of {IMAGES} images...", os.getpid())
    assert [state for state, _, _ in written] == ["preparing"] * len(written)
    assert run.read_status().state == "preparing"
    # What the run's trainer then loads is in the cache, decoded and resized.
    monkeypatch.setattr(own, "decode_many", refuse)
    monkeypatch.setattr(stream, "resize", refuse)
    assert data.resized(data.load("folder", folder), 32).shape == (IMAGES, 3, 32, 32)


def test_prepare_data_prepares_what_the_plan_trains_and_touches_no_device(cache, folder, tmp_path):
    """'auto' is the 64x64 preset on a GPU (the data's own size: nothing resized) and the 32x32 one
    on a CPU; preparing either imports no torch_xla and starts no CUDA."""
    from core.devices import DeviceInfo
    from core.plan import DataFacts, make_plan
    config = TrainConfig(dataset="folder", data_path=folder, preset="auto", batch_size=16)
    script = ("import sys, json\n"
              "from core.train import prepare_data\n"
              "ok = prepare_data(sys.argv[1])\n"
              "import torch\n"
              "print(json.dumps([ok, 'torch_xla' in sys.modules, torch.cuda.is_initialized()]))\n")
    for kind, resized in (("cuda", []), ("cpu", ["-32px.pt"])):
        plan = make_plan(config, DeviceInfo(kind, kind.upper()), DataFacts.listed("folder", folder))
        run = RunDir.create(plan, str(tmp_path / "runs"))
        out = run_cli(["-c", script, run.path], timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, False, False], out.stderr
        files = os.listdir(os.path.join(cache, "own"))
        assert [name[-8:] for name in files if name.endswith("px.pt")] == resized, files


def test_prepare_data_refuses_a_folder_emptied_since_start_in_the_datasets_words(cache, tmp_path):
    """Start planned the folder's images; they are gone when its data is prepared."""
    from tests.filehelpers import png_bytes
    from PIL import Image
    gone = tmp_path / "gone"
    gone.mkdir()
    for i in range(20):
        (gone / f"{i}.png").write_bytes(png_bytes(Image.new("RGB", (8, 8), (10 * i, 0, 0))))
    run = RunDir.create(cpu_plan(dataset="folder", data_path=str(gone), preset="fast", batch_size=16),
                        str(tmp_path / "runs"))
    for image in gone.iterdir():
        image.unlink()
    (gone / "notes.txt").write_text("no images here")
    with pytest.raises(data.DatasetError) as refused:
        data.load("folder", str(gone))
    assert prepare_data(run.path) is False
    status = run.read_status()
    assert (status.state, status.message) == ("failed", str(refused.value))


def test_a_chunks_seconds_are_counted_from_its_first_step(cache, tmp_path, monkeypatch):
    """Setup slower than the whole chunk (a dataset that takes three seconds to load) takes none of
    the chunk's two seconds of training: it still trains steps, then ends as a chunk does (counted
    from the trainer's start, the chunk would end after its first step)."""
    load = data.load

    def slow_load(*args, **kwargs):
        time.sleep(3.0)
        return load(*args, **kwargs)
    monkeypatch.setattr(data, "load", slow_load)
    config = TrainConfig(preset="fast", batch_size=16, steps=10000, log_every=5, grid_every=1000,
                         quality_every=0, device="cpu")
    plan = cpu_plan(config)
    run = RunDir.create(plan, str(tmp_path))
    assert train(plan, run.path, chunk=Chunk(1, 2.0)) == "running"
    status = run.read_status()
    assert status.message.startswith("Chunk 1 ended at step"), status.message
    # Counted from the trainer's start, the chunk would have ended after its first step.
    assert 2 <= status.step < config.steps and status.saved_step == status.step   # ended by the clock, saved
