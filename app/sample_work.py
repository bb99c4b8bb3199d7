"""The Sample tab's heavy work: sampling, zips, GIFs, directions, neighbours, timelapses, copies.

Each function is what one event computes once app/sample_tab.py has checked its inputs: top-level,
plain values in and out, so app/viewer_work.run runs it in a viewer-work process behind the trainer.
Its caches live there, bounded and unlocked (a worker runs one request at a time). The UI process
imports this module too and never imports torch (issue 13): torch and core.sample only inside.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np

from core.architecture import GeneratorFileError
from core.config import TrainConfig
from core.data import DatasetError
from core.images import gif_bytes, grid_image, to_model_range, to_uint8
from core.rundir import generator_files, write_atomic

N_DIRECTIONS = 5
KEPT_GENERATORS = 4        # loaded at once: viewers may look at different runs
# Looks kept (grids, strips, explored images: a few MB each). A room asks for the same look at once
# (every page samples seed 0 when a run ends): each is drawn once per generator file, not per viewer.
KEPT_LOOKS = 8
NO_GENERATOR = "No generator to sample from yet: train a run, or wait for its first checkpoint."


class SampleError(ValueError):
    """Work refused with a message for the student, which sample_tab shows under `title`; it pickles."""

    def __init__(self, message: str, title: str = "Could not make it"):
        super().__init__(message, title)
        self.title = title

    def __str__(self) -> str:
        return self.args[0]


def _keep(store: dict, key, value, limit: int = KEPT_GENERATORS):
    """store[key] = value, dropping the oldest entries beyond limit."""
    store[key] = value
    while len(store) > limit:
        store.pop(next(iter(store)))
    return value


def _load_generator(weights: str, description: str):
    """(generator, meta) once every check of the pair passed; a SampleError saying why not."""
    from core import sample as sampling
    try:
        return sampling.load_generator(weights, description)
    except GeneratorFileError as exc:
        raise SampleError(str(exc), "Generator not loaded")


_generators: dict = {}             # (directory, file mtime) -> (generator, meta)
_looks: dict = {}                  # (generator key, what, its arguments) -> the result
_directions: dict = {}             # generator key -> (directions, explained ratio)
_pools: dict = {}                  # (run config, resolution, channels) -> (images, name): one at a time


def _generator(directory: str):
    """((generator, meta), key), loaded again when the file changes (a run saved a newer one)."""
    weights, description = generator_files(directory)
    try:
        key = (directory, os.stat(weights).st_mtime_ns)
    except OSError:
        raise SampleError(NO_GENERATOR, "No generator yet")
    if key not in _generators:
        _keep(_generators, key, _load_generator(weights, description))
    return _generators[key], key


def _scale(resolution: int) -> int:
    """Nearest-neighbour upscaling factor so a 28 px digit is not a speck in a GIF."""
    return max(1, 128 // resolution)


def _labelled(frame: np.ndarray, text: str) -> np.ndarray:
    """A frame with a caption band on top (PIL's built-in bitmap font: no font files needed)."""
    from PIL import Image, ImageDraw
    img = Image.fromarray(frame).convert("RGB")
    canvas = Image.new("RGB", (img.width, img.height + 14), "black")
    canvas.paste(img, (0, 14))
    ImageDraw.Draw(canvas).text((3, 2), text, fill="white")
    return np.asarray(canvas)


def read_png(path: str) -> np.ndarray:
    """Pixels rather than a path: a run folder may be outside the paths Gradio serves."""
    from PIL import Image
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


# ---- seeds ------------------------------------------------------------------------------------
def _samples(generator, seed: int, count: int, label: int | None):
    from core import sample as sampling
    return sampling.generate(generator, sampling.latents(seed, count, generator.z_dim),
                             sampling.class_labels(generator, seed, count, label))


def _look(directory: str, what, make):
    """make(generator, meta, key), drawn once for this generator file and `what` (the look and its arguments)."""
    (generator, meta), key = _generator(directory)
    look = (key, *what)
    if look in _looks:
        _looks[look] = _looks.pop(look)   # the newest again: the oldest go first
        return _looks[look]
    return _keep(_looks, look, make(generator, meta, key), KEPT_LOOKS)


def sample_grid(directory: str, seed: int, count: int, label: int | None, columns: int) -> tuple[np.ndarray, object]:
    """A grid of `count` samples from `seed` (all of class `label`, or the seed's classes), and the generator's step."""
    def make(generator, meta, _key):
        return grid_image(_samples(generator, seed, count, label), columns=columns), meta.get("step", "?")
    return _look(directory, ("grid", seed, count, label, columns), make)


def samples_zip(directory: str, seed: int, count: int, label: int | None, path: str) -> tuple[str, object]:
    """A zip of the samples' PNGs, and the step of the generator that drew them."""
    from core import sample as sampling
    (generator, meta), _ = _generator(directory)
    images = _samples(generator, seed, count, label)
    return sampling.write_samples_zip(images, path, prefix=f"seed{seed}"), meta.get("step", "?")


# ---- interpolation ----------------------------------------------------------------------------
def _interpolation(generator, seeds: tuple[int, int], steps: int, mode: str, classes: tuple[int, int]):
    """Images along seeds[0] -> seeds[1], the class weights moving from classes[0] to classes[1]."""
    import torch
    from core import sample as sampling
    z = sampling.interpolation_latents(*seeds, steps, generator.z_dim, mode)
    labels = sampling.blended_labels(generator, *classes, torch.linspace(0, 1, steps))
    return sampling.generate(generator, z, labels)


def interpolation_strip(directory: str, seeds: tuple[int, int], steps: int, mode: str,
                        classes: tuple[int, int]) -> tuple[np.ndarray, object]:
    def make(generator, meta, _key):
        images = _interpolation(generator, seeds, steps, mode, classes)
        return grid_image(images, columns=steps), meta.get("step", "?")
    return _look(directory, ("strip", tuple(seeds), steps, mode, tuple(classes)), make)


def interpolation_gif(directory: str, seeds: tuple[int, int], steps: int, mode: str, classes: tuple[int, int],
                      path: str) -> tuple[str, object]:
    (generator, meta), _ = _generator(directory)
    images = _interpolation(generator, seeds, steps, mode, classes)
    frames = list(to_uint8(images))
    frames = frames + frames[-2:0:-1]      # there and back, so the loop has no jump
    write_atomic(path, gif_bytes(frames, duration_ms=90, scale=_scale(images.shape[-1])))
    return path, meta.get("step", "?")


# ---- directions, truncation and neighbours -----------------------------------------------------
def _explored(generator, key, seed: int, psi: float, amounts: list[float]):
    """The seed's image, truncated and moved along the generator's directions; their variance shares."""
    from core import sample as sampling
    if key not in _directions:
        _keep(_directions, key, sampling.principal_directions(generator, k=N_DIRECTIONS))
    directions, ratio = _directions[key]
    z = sampling.edit_latent(sampling.latents(seed, 1, generator.z_dim), directions, amounts, psi)
    return sampling.generate(generator, z, sampling.seed_labels(generator, seed, 1))[0], ratio


def explored_image(directory: str, seed: int, psi: float, amounts: list[float]) -> dict:
    """_explored's image, enlarged; the directions' shares of the variance and the generator's step."""
    def make(generator, meta, key):
        image, ratio = _explored(generator, key, seed, psi, amounts)
        up = _scale(image.shape[-1])
        return {"image": grid_image(image[None], columns=1).repeat(up, 0).repeat(up, 1),
                "variance": ratio.tolist(), "step": meta.get("step", "?")}
    return _look(directory, ("explored", seed, psi, tuple(amounts)), make)


def _training_pool(run_config: dict | None, resolution: int, channels: int):
    from core import sample as sampling
    config = TrainConfig.from_dict(run_config) if run_config is not None else None
    key = (json.dumps(run_config, sort_keys=True), resolution, channels)
    if key not in _pools:
        _pools.clear()
        _pools[key] = sampling.training_images(config, resolution, channels)
    return _pools[key]


def neighbours(directory: str, seed: int, psi: float, amounts: list[float], k: int, run_config: dict | None) -> dict:
    """The explored image beside its k nearest training images (of the dataset of run_config, which the
    server wrote; None: the bundled MNIST), their L2 distances, the pool's size and name, the step."""
    from core import sample as sampling
    (generator, meta), key = _generator(directory)
    image, _ = _explored(generator, key, seed, psi, amounts)
    try:
        pool, dataset = _training_pool(run_config, image.shape[-1], image.shape[0])
    except DatasetError as exc:   # e.g. the run's dataset is absent offline: its advice, not a blank failure
        raise SampleError(f"The training images are not available here. {exc}", "No neighbours")
    except (OSError, RuntimeError):   # unreadable cache or files: no errno or server path for the page
        raise SampleError("The training images could not be read on this server.", "No neighbours")
    idx, dist = sampling.nearest_neighbours(image, pool, min(k, len(pool)))
    real = to_model_range(pool[idx]).numpy()
    strip = grid_image(np.concatenate([image[None], real]), columns=len(idx) + 1)
    up = max(1, _scale(image.shape[-1]) // 2)
    return {"strip": strip.repeat(up, 0).repeat(up, 1), "distances": [float(d) for d in dist],
            "pool": len(pool), "dataset": dataset, "step": meta.get("step", "?")}


# ---- timelapse ----------------------------------------------------------------------------------
def timelapse_gif(grids: list[tuple[int, str]], path: str) -> str:
    """A looping GIF of the (step, grid PNG) frames, each captioned with its step."""
    frames = [_labelled(read_png(png), f"step {step}") for step, png in grids]
    # Linger on the newest grid before looping (a long last frame: PIL merges repeated ones).
    write_atomic(path, gif_bytes(frames, duration_ms=[150] * (len(frames) - 1) + [1500]))
    return path


# ---- generator files ----------------------------------------------------------------------------
def copy_files(sources: list[str], destinations: list[str]) -> list[str]:
    for source, destination in zip(sources, destinations):
        shutil.copyfile(source, destination)
    return destinations


def check_upload(weights: str, meta: str) -> str:
    """Every check of an uploaded pair (header, spec, strict shapes, finite values); its digest."""
    _load_generator(weights, meta)
    digest = hashlib.sha256()
    for path in (weights, meta):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def install_generator(weights: str, meta: str, directory: str) -> dict:
    """Copy a checked pair into `directory` and load the copy (so a bad copy fails now); its spec and step."""
    copy_files([weights, meta], list(generator_files(directory)))
    (generator, loaded_meta), _ = _generator(directory)
    return {**generator.spec.to_dict(), "step": loaded_meta.get("step", "?")}
