"""A folder or zip of images in class subfolders (torchvision's ImageFolder layout) trains
class-conditional, and its class names reach the status, the generator and core.sample.

Real images made here (a colour per class), the real loaders and cache, one real CLI run.
Every test runs with an empty private cache (BLINK_DATA_DIR) and BLINK_OFFLINE=1.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from core import data
from core.data.own import MIN_CLASS_IMAGES
from tests.filehelpers import png_bytes
from tests.clihelpers import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Sorted names, so label i is CLASSES[i]; each class's images are mostly its channel.
CLASSES = {"blue": 2, "green": 1, "red": 0}


def coloured(channel: int, seed: int) -> bytes:
    """A small noisy PNG whose colour is mostly `channel`."""
    pixels = np.random.default_rng(seed).integers(0, 40, (12, 12, 3)).astype(np.uint8)
    pixels[:, :, channel] += 200
    return png_bytes(Image.fromarray(pixels))


def class_files(per_class: int = MIN_CLASS_IMAGES, prefix: str = "") -> dict[str, bytes]:
    return {f"{prefix}{name}/{i:02d}.png": coloured(channel, 10 * channel + i)
            for name, channel in CLASSES.items() for i in range(per_class)}


def write_folder(folder, files: dict[str, bytes]) -> str:
    for name, payload in files.items():
        os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(payload)
    return str(folder)


def write_zip(path, files: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, payload in files.items():
            archive.writestr(name, payload)
    return str(path)


def assert_classes_by_colour(loaded) -> None:
    assert loaded.class_names == list(CLASSES)
    assert loaded.labels.dtype == torch.int64 and len(loaded.labels) == len(loaded)
    assert torch.bincount(loaded.labels).tolist() == [MIN_CLASS_IMAGES] * len(CLASSES)
    for label, channel in enumerate(CLASSES.values()):
        brightest = loaded.images[loaded.labels == label].float().mean((0, 2, 3)).argmax()
        assert brightest == channel, (label, brightest)


# ==== the layout ==============================================================================
def test_class_subfolders_give_labels_and_names_and_the_cache_keeps_them(cache, tmp_path):
    folder = write_folder(tmp_path / "colours", class_files())
    info = data.dataset_info("folder", folder)
    assert info["available"] and "3 classes, one per subfolder (blue 10, green 10, red 10)" in info["message"]
    assert_classes_by_colour(data.load("folder", folder))
    # Loaded again from the decoded cache: the same labels and names, and the UI sees them.
    again = data.load("folder", folder)
    assert_classes_by_colour(again)
    assert data.dataset_info("folder", folder)["cached"]
    # A cache written before class subfolders gave labels has no class names: decoded again, not reused.
    meta_file = next((cache / "own").glob("*.json"))
    meta = json.loads(meta_file.read_text())
    del meta["class_names"]
    meta_file.write_text(json.dumps(meta))
    assert not data.dataset_info("folder", folder)["cached"]
    assert_classes_by_colour(data.load("folder", folder))


def test_a_zip_of_the_same_classes_in_a_wrapper_folder_gives_the_same_set(cache, tmp_path):
    folder = write_folder(tmp_path / "colours", class_files())
    archive = write_zip(tmp_path / "colours.zip", class_files(prefix="colours/"))
    from_zip, from_folder = data.load("folder", archive), data.load("folder", folder)
    assert_classes_by_colour(from_zip)
    assert torch.equal(from_zip.images, from_folder.images) and torch.equal(from_zip.labels, from_folder.labels)


def test_a_flat_folder_and_images_beside_subfolders_train_without_classes(cache, tmp_path):
    flat = write_folder(tmp_path / "flat", {f"{i}.png": coloured(i % 3, i) for i in range(12)})
    loaded = data.load("folder", flat)
    assert loaded.labels is None and loaded.class_names == [] and len(loaded) == 12
    # Two images in the top folder beside the class folders: nothing is dropped, and the note says why no classes.
    mixed = write_folder(tmp_path / "mixed", {**class_files(), "stray.png": coloured(0, 99), "x.png": coloured(1, 98)})
    loaded = data.load("folder", mixed)
    assert loaded.labels is None and len(loaded) == 3 * MIN_CLASS_IMAGES + 2
    note = data.dataset_info("folder", mixed)["message"]
    assert "2 image(s) sit in the top folder beside subfolders of images" in note


def test_a_class_with_too_few_images_is_refused_by_name(cache, tmp_path):
    files = class_files()
    for i in range(3, MIN_CLASS_IMAGES):
        del files[f"green/{i:02d}.png"]
    folder = write_folder(tmp_path / "colours", files)
    refusal = fr"at least {MIN_CLASS_IMAGES} images; too few in 'green' \(3 images\)"
    with pytest.raises(data.DatasetError, match=refusal):
        data.load("folder", folder)
    info = data.dataset_info("folder", folder)
    assert not info["available"] and "'green' (3 images)" in info["message"]
    # Enough files listed, but some unreadable: counted again after decoding.
    files = class_files()
    files["red/00.png"] = b"\x89PNG broken"
    with pytest.raises(data.DatasetError, match=r"too few in 'red' \(9 readable images\)"):
        data.load("folder", write_zip(tmp_path / "broken.zip", files))


def test_the_trainer_is_class_conditional_on_a_class_folder_unless_told_off(cache, tmp_path):
    from core import devices
    from core.config import TrainConfig
    from core.plan import plan_run
    from core.training import build_training
    folder = write_folder(tmp_path / "colours", class_files())
    info = devices.probe("cpu")
    for conditional, classes, names in (("auto", 3, list(CLASSES)), ("off", 0, [])):
        training = build_training(plan_run(TrainConfig(dataset="folder", data_path=folder, preset="fast",
                                                       batch_size=8, steps=2, device="cpu",
                                                       conditional=conditional), info))
        assert (training.classes, training.class_names, training.G.spec.classes) == (classes, names, classes)


# ==== a real run, its status, its generator, core.sample ========================================
def test_a_cli_run_on_class_folders_names_its_classes_to_the_status_the_generator_and_sample(cache, tmp_path, capsys):
    from app.sample_tab import FOLLOW, SampleTab
    from core import sample as S
    from core.rundir import RunDir
    folder = write_folder(tmp_path / "colours", class_files())
    run = tmp_path / "run"
    done = run_cli(["-m", "core.train", "--dataset", "folder", "--data-path", folder,
                    "--preset", "fast", "--steps", "4", "--log-every", "2",
                    "--grid-every", "4", "--checkpoint-every", "4", "--quality-every", "0", "--device", "cpu",
                    "--run-dir", str(run)], timeout=300)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "done", (status["message"], done.stderr[-2000:])
    assert status["classes"] == 3 and status["class_names"] == list(CLASSES)
    # The form's batch of 128 from a set of 30: the whole set a step, said in the status.
    assert status["batch_size"] == 30 and status["batch_reason"] == "lowered from 128: the set has 30 images"
    # Resumed with the form's batch of 128 again (the page's and the CLI's default): the same run,
    # not a changed config, and its status still says why the batch is 30.
    from core.resume import prepare_resume
    from core.train import probe_device, train
    resumed, _ = prepare_resume(RunDir(str(run)), 6, {"batch_size": 128}, lambda requested: probe_device(requested))
    assert resumed.config.batch_size == 30
    assert train(resumed, str(run), resume=True) == "done"
    status = json.loads((run / "status.json").read_text())
    assert (status["step"], status["batch_size"]) == (6, 30), status
    assert status["batch_reason"] == "lowered from 128: the set has 30 images", status
    # Three classes make a grid three columns a class wide, not a ribbon: each column one class, the
    # real images laid out the same way.
    verdicts = RunDir(str(run)).read_verdicts(4)
    assert verdicts["columns"] == 9 and len(verdicts["real"]) == 63
    from PIL import Image
    with Image.open(run / "grids" / "step_000004.png") as grid, Image.open(run / "grids" / "real.png") as real:
        assert grid.size == real.size == (9 * 34 + 2, 7 * 34 + 2)
        # Each class is a colour (red, green, blue): every tile of a column of the real grid has its class's.
        tiles = np.asarray(real.convert("RGB")).astype(int)
        dominant = [[int(tiles[2 + r * 34 + 16, 2 + c * 34 + 16].argmax()) for c in range(9)] for r in range(7)]
        assert all(row == dominant[0] for row in dominant) and len(set(dominant[0][:3])) == 3, dominant
    # 64x64 images train at 32x32 on the CPU preset, D seeing them augmented (a small set).
    assert status["resolution"] == 32 and status["augment"].startswith("on: ")
    from app import views
    from core.status import Status
    seen = Status.from_dict(status)
    assert "fast model 32x32, 3 classes, augmented" in views.status_line(seen)
    rows = dict(views.diagnostics_rows(seen))
    assert rows["Augmentation of what D sees"].startswith(f"on: {MIN_CLASS_IMAGES} images a class is under")
    # Adaptive: the share augmented starts at 0 and is shown (core/augment.py).
    assert rows["Share of D's images augmented now (it rises while D memorises the set)"].endswith("%")
    meta = json.loads((run / "generator.json").read_text())
    assert meta["spec"]["classes"] == 3 and meta["class_names"] == list(CLASSES)
    # --label by name draws that class: the same images as by its index.
    by_name, by_index = str(tmp_path / "green.npy"), str(tmp_path / "one.npy")
    assert S.main(["--run", str(run), "--label", "green", "--n", "4", "--out", by_name]) == 0
    assert S.main(["--run", str(run), "--label", "1", "--n", "4", "--out", by_index]) == 0
    assert np.load(by_name).shape == (4, 3, 32, 32) and np.array_equal(np.load(by_name), np.load(by_index))
    capsys.readouterr()
    assert S.main(["--run", str(run), "--label", "purple", "--n", "4", "--out", by_name]) == 2
    assert "'purple' is not one of this generator's classes: blue, green, red" in capsys.readouterr().err
    # The Sample tab's class pickers show the names; their values stay the indices.
    shown = SampleTab(lambda: str(run)).shown(FOLLOW, 0, 4, "seed")
    pickers = [update for update in shown.values() if isinstance(update, dict) and "choices" in update
               and update.get("info") == "3 classes"]
    assert len(pickers) == 3
    assert all(picker["choices"][1:] == [("blue", "0"), ("green", "1"), ("red", "2")] for picker in pickers)
    # A checkpoint of nets of another size (an older Blink's fast preset trained this folder at
    # 64x64): resuming it refuses in words, and keeps its checkpoint and generator.
    from core import gans, models
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    config = RunDir(str(run)).read_config()
    old_g, old_d = models.build(gans.get(config.gan), config.preset, 3, 64, config.z_dim, 3)
    state.update(G=old_g.state_dict(), D=old_d.state_dict())
    state.pop("G_ema", None)
    torch.save(state, run / "checkpoint.pt")
    kept = (run / "checkpoint.pt").read_bytes(), (run / "generator.safetensors").read_bytes()
    resumed = run_cli(["-m", "core.train", "--resume", str(run), "--steps", "8"], timeout=300)
    status = json.loads((run / "status.json").read_text())
    assert resumed.returncode != 0 and status["state"] == "failed", (status, resumed.stderr[-2000:])
    assert "saved at another size than this Blink builds for its config (32x32)" in status["message"]
    assert "Start a new run" in resumed.stdout + resumed.stderr
    assert ((run / "checkpoint.pt").read_bytes(), (run / "generator.safetensors").read_bytes()) == kept
