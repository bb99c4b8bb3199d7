"""What a room asks for at once is made once: a look at a generator is drawn once per generator
file (app/sample_work.py), and a picture the page already has is not encoded again (app/serving.py).

The shipped generator, copied, sampled in this process (the worker runs these same functions);
Gradio's own image-output path (processing_utils.save_img_array_to_cache).
"""
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from app import sample_work
from app.job import SHIPPED_GENERATOR


@pytest.fixture
def generator(tmp_path):
    directory = str(tmp_path / "generator")
    shutil.copytree(SHIPPED_GENERATOR, directory)
    return directory


def save_changed_weights(directory: str) -> None:
    """Another generator file where the first: as a run's next checkpoint writes it."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(directory, "generator.safetensors")
    weights = load_file(path)
    weights = {name: value * 1.5 if value.is_floating_point() else value for name, value in weights.items()}
    before = os.stat(path).st_mtime_ns
    save_file(weights, path)
    os.utime(path, ns=(before + 10**9, before + 10**9))   # a newer file, whatever the clock's grain


def test_a_look_is_drawn_once_per_generator_file(generator):
    grid, step = sample_work.sample_grid(generator, 0, 16, None, 10)
    again, _ = sample_work.sample_grid(generator, 0, 16, None, 10)
    assert again is grid                                              # drawn once, handed out twice
    other, _ = sample_work.sample_grid(generator, 1, 16, None, 10)
    assert other is not grid and not np.array_equal(other, grid)      # another seed: another look
    strip, _ = sample_work.interpolation_strip(generator, (0, 1), 4, "linear", (0, 1))
    assert sample_work.interpolation_strip(generator, (0, 1), 4, "linear", (0, 1))[0] is strip
    explored = sample_work.explored_image(generator, 3, 0.7, [0.0, 1.0, 0.0, 0.0, 0.0])
    assert sample_work.explored_image(generator, 3, 0.7, [0.0, 1.0, 0.0, 0.0, 0.0]) is explored
    # A new generator file (the run's next checkpoint) is drawn afresh.
    save_changed_weights(generator)
    newer, _ = sample_work.sample_grid(generator, 0, 16, None, 10)
    assert newer.shape == grid.shape and not np.array_equal(newer, grid)
    # The looks kept are bounded.
    for seed in range(2 * sample_work.KEPT_LOOKS):
        sample_work.sample_grid(generator, seed, 4, None, 4)
    assert len(sample_work._looks) == sample_work.KEPT_LOOKS


def test_a_picture_already_written_is_not_encoded_again(tmp_path, monkeypatch):
    from gradio import processing_utils
    from app.serving import write_cached_images_whole
    monkeypatch.setattr(processing_utils, "save_pil_to_cache", processing_utils.save_pil_to_cache)  # put back after
    write_cached_images_whole()
    encoded = []
    real_encode = processing_utils.encode_pil_to_bytes
    monkeypatch.setattr(processing_utils, "encode_pil_to_bytes", lambda *a, **k: encoded.append(1) or real_encode(*a, **k))
    pixels = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    cache = str(tmp_path / "gradio")
    first = processing_utils.save_img_array_to_cache(pixels, cache, format="png")
    assert processing_utils.save_img_array_to_cache(pixels.copy(), cache, format="png") == first
    assert len(encoded) == 1 and np.array_equal(np.asarray(Image.open(first)), pixels)
    # Other pixels are another file; a file Gradio's cleaning removed is written again.
    changed = pixels.copy()
    changed[0, 0] += 1
    assert processing_utils.save_img_array_to_cache(changed, cache, format="png") != first
    shutil.rmtree(os.path.dirname(first))
    again = processing_utils.save_img_array_to_cache(pixels, cache, format="png")
    assert again == first and np.array_equal(np.asarray(Image.open(again)), pixels) and len(encoded) == 3
