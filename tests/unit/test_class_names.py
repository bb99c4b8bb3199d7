"""Class names (one per subfolder) are held to the generator loader's one rule before any training
(issue 45): a set whose names would make an unloadable generator.json is refused by name at upload,
at Start (the dataset's listing) and in the trainer; a set just inside the limits saves a generator
that core.sample loads. Names never reach a page as markup.

Real zips of real PNGs, the real upload and listing code, the real save path (RunDir.save_generator)
and loader. Every test runs with an empty private cache (BLINK_DATA_DIR) and BLINK_OFFLINE=1.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import zipfile

import pytest
from PIL import Image

from core import data, uploads
from core.architecture import (CLASS_NAMES_BYTES, MAX_CLASS_NAME, MAX_META_BYTES, GeneratorSpec, class_names_bytes,
                               class_names_problem)
from core.data.cache import uploads_dir
from core.data.own import MIN_CLASS_IMAGES, listed_classes
from tests.filehelpers import png_bytes

PNG = png_bytes(Image.new("RGB", (8, 8), (200, 30, 30)))
LONG = "x" * 300                                            # a name a zip may hold, no file system
CJK = [chr(0x4E00 + i) * 60 for i in range(1000)]           # 1,000 classes of 60 CJK characters


def class_zip(path, names, per_class: int = MIN_CLASS_IMAGES) -> str:
    """A zip with one subfolder of `per_class` PNGs for each name."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            for i in range(per_class):
                archive.writestr(f"{name}/{i:02d}.png", PNG)
    return str(path)


def names_at_the_limit() -> list[str]:
    """1,000 different names (36 CJK characters and some ASCII) that take exactly CLASS_NAMES_BYTES."""
    names = [chr(0x4E00 + i) * 36 for i in range(1000)]
    short = CLASS_NAMES_BYTES - class_names_bytes(names)
    assert short > 0
    names = [name + "a" * (short // 1000 + (i < short % 1000)) for i, name in enumerate(names)]
    assert class_names_bytes(names) == CLASS_NAMES_BYTES
    return sorted(names)


# ==== refused before training, by the loader's rule, naming the folder ========================
@pytest.mark.parametrize("names, words", [
    ([LONG, "cats"], [f"the class name '{'x' * 40}...' is 300 characters long; at most {MAX_CLASS_NAME} fit"]),
    (CJK, ["the 1,000 class names would take", f"more than the {CLASS_NAMES_BYTES // 1024} KB it keeps for them",
           f"(the longest there: '{CJK[0][:40]}...')", "36 other letters"]),
], ids=["300-character name", "1000 x 60 CJK"])
def test_names_no_generator_could_hold_are_refused_at_upload_start_and_in_the_trainer(cache, tmp_path, names, words):
    path = class_zip(tmp_path / "classes.zip", names)
    problem = class_names_problem(sorted(names))
    assert problem and all(word in problem for word in words), problem
    # At upload: refused, nothing kept.
    with pytest.raises(data.DatasetError) as upload:
        uploads.keep_upload(path)
    message = str(upload.value)
    assert problem in message and "Rename the subfolders shorter or use fewer of them" in message
    assert LONG not in message and CJK[0] not in message              # named, shortened
    assert not os.path.isdir(uploads_dir()) or os.listdir(uploads_dir()) == []
    # At Start (the form checks the dataset's listing) and in the trainer: the same refusal.
    info = data.dataset_info("folder", path)
    assert not info["available"] and info["message"] == message
    with pytest.raises(data.DatasetError, match="Each subfolder is a class, named after it"):
        data.load("folder", path)


def test_the_loader_refuses_those_names_by_the_same_rule(tmp_path):
    """The issue's two generator files, were they saved: the loader refuses both, the first in the
    dataset check's words, the second already by the size cap the names' share is derived from."""
    from core import sample as S
    for names, words in (([LONG, "cats"], class_names_problem([LONG, "cats"])),
                         (CJK, f"a real one is under {MAX_META_BYTES // 1024} KB")):
        folder = str(tmp_path / str(len(names)))
        save_generator(folder, names)
        with pytest.raises(S.GeneratorFileError) as refused:
            S.load_run_generator(folder)
        assert words in str(refused.value)


# ==== just inside: trains into a generator that loads ==========================================
def save_generator(folder: str, names: list[str], data_path: str = "upload:x.zip") -> None:
    """A tiny generator of len(names) classes written through the trainer's save path, its
    description as core/train.py makes it (spec, config, step, preset, format, class names)."""
    from core.config import TrainConfig
    from core.models import Generator
    from core.rundir import RunDir
    os.makedirs(folder, exist_ok=True)
    spec = GeneratorSpec(z_dim=1, channels=1, resolution=28, width=1, classes=len(names))
    config = TrainConfig(dataset="folder", data_path=data_path, preset="fast", steps=10**6)
    meta = {"spec": spec.to_dict(), "config": config.to_dict(), "step": 10**6, "preset": "fast",
            "format": "blink-generator-v1", "class_names": names}
    RunDir(folder).save_generator(Generator(spec).state_dict(), meta)


def test_names_just_inside_the_limits_pass_and_save_a_generator_that_loads(cache, tmp_path):
    from core import sample as S
    names = names_at_the_limit()
    path = class_zip(tmp_path / "classes.zip", names)
    kept = uploads.keep_upload(path)                       # accepted at upload ...
    assert kept["images"] == 1000 * MIN_CLASS_IMAGES
    info = data.dataset_info("folder", path)              # ... and at Start
    assert info["available"] and "1000 classes, one per subfolder" in info["message"], info["message"]
    listed = listed_classes(data.list_images(path))
    assert listed.names == names
    # The longest path a Linux folder may have, in CJK (6 bytes a character in the JSON): the
    # room the cap keeps besides the names holds it.
    run = str(tmp_path / "run")
    save_generator(run, listed.names, data_path="/" + "\u6587" * 1364)
    size = os.path.getsize(os.path.join(run, "generator.json"))
    assert 0.9 * MAX_META_BYTES < size <= MAX_META_BYTES
    generator, meta = S.load_run_generator(run)
    assert generator.classes == 1000 and S.class_names(meta) == names
    # One character more is past the rule: the dataset check and the loader both say so.
    over = [names[0] + "a", *names[1:]]
    assert class_names_problem(over) and class_names_bytes(over) == CLASS_NAMES_BYTES + 1
    with pytest.raises(data.DatasetError, match="KB it keeps for them"):
        uploads.keep_upload(class_zip(tmp_path / "over.zip", over))
    save_generator(run, over)
    assert os.path.getsize(os.path.join(run, "generator.json")) < MAX_META_BYTES   # the file alone would pass
    with pytest.raises(S.GeneratorFileError, match="KB it keeps for them"):
        S.load_run_generator(run)


# ==== markup in a name is text on the page =====================================================
MARKUP = ["<img src=x id=pwn>", "<b id=bold>"]


def test_markup_in_a_folder_name_is_never_markup_in_a_message(cache, tmp_path):
    path = class_zip(tmp_path / "ok.zip", MARKUP)
    note = data.dataset_info("folder", path)["message"]
    assert "2 classes, one per subfolder" in note and "<" not in note and r"\x3cb id=bold\x3e 10" in note
    few = class_zip(tmp_path / "few.zip", MARKUP, per_class=3)
    with pytest.raises(data.DatasetError) as refused:
        uploads.keep_upload(few)
    assert r"'\x3cimg src=x id=pwn\x3e' (3 images)" in str(refused.value) and "<" not in str(refused.value)


def test_a_caption_says_a_markup_class_name_as_text_and_the_pickers_carry_it_as_is(tmp_path):
    from app.job import SHIPPED_GENERATOR
    from app.sample_tab import FOLLOW, SampleTab
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(os.path.join(SHIPPED_GENERATOR, "generator.safetensors"), run)
    with open(os.path.join(SHIPPED_GENERATOR, "generator.json")) as f:
        meta = json.load(f)
    names = MARKUP + [f"digit {i}" for i in range(2, 10)]
    (run / "generator.json").write_text(json.dumps({**meta, "class_names": names, "step": "<b id=bold>"}))
    tab = SampleTab(lambda: str(run))
    _, caption = tab.sample(FOLLOW, 0, 4, "1")
    assert r"Every sample is class '\<b id=bold\>'." in caption
    assert not re.search(r"(?<!\\)<", caption)          # every < escaped: Markdown shows it as text
    assert "at step ?" in caption                        # a step that is no number is not shown
    shown = tab.shown(FOLLOW, 0, 4, "seed")
    assert r"starting from class '\<img src=x id=pwn\>'" in shown[tab.caption]
    assert shown[tab.digit]["choices"][1:3] == [(MARKUP[0], "0"), (MARKUP[1], "1")]   # a dropdown draws text
