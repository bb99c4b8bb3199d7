"""The Sample tab: seeds -> grid, two seeds -> interpolation strip, generator download.

Sampling runs on the CPU in the UI process (a small generator renders 64 images in
milliseconds), so the trainer keeps the device to itself.
"""
from __future__ import annotations

import os

import gradio as gr

from core import sample as sampling
from core.rundir import grid_image

MAX_GRID = 256
MAX_STRIP = 32


class GeneratorCache:
    """The loaded generator, reloaded only when its file changes (a run saves a newer one)."""

    def __init__(self):
        self._key = None
        self._value = None

    def get(self, directory: str):
        weights = os.path.join(directory, "generator.safetensors")
        try:
            key = (directory, os.stat(weights).st_mtime_ns)
        except OSError:
            raise gr.Error("No generator to sample from yet: train a run, or wait for its first checkpoint.")
        if key != self._key:
            try:
                self._value = sampling.load_generator(weights, os.path.join(directory, "generator.json"))
            except sampling.GeneratorFileError as exc:
                raise gr.Error(str(exc))
            self._key = key
        return self._value


def _int(value, name: str, low: int, high: int) -> int:
    """Server-side check of a number from the page (widgets' limits are not enforced by clients)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{name} must be a whole number.")
    if not low <= number <= high:
        raise gr.Error(f"{name} must be between {low} and {high} (got {number}).")
    return number


def build(generator_dir, columns_default: int = 8):
    """Lay out the Sample tab's contents; `generator_dir()` says which generator to use."""
    cache = GeneratorCache()

    def sample(seed, count):
        seed, count = _int(seed, "Seed", 0, 2**31 - 1), _int(count, "Count", 1, MAX_GRID)
        generator, meta = cache.get(generator_dir())
        images = sampling.generate(generator, sampling.latents(seed, count, generator.z_dim))
        caption = f"{count} samples, seed {seed}, generator from step {meta.get('step', '?')}"
        return grid_image(images, columns=min(columns_default, count)), caption

    def interpolate(seed_a, seed_b, steps, mode):
        seed_a, seed_b = _int(seed_a, "Seed A", 0, 2**31 - 1), _int(seed_b, "Seed B", 0, 2**31 - 1)
        steps = _int(steps, "Steps", 2, MAX_STRIP)
        if mode not in ("linear", "spherical"):
            raise gr.Error("Interpolation must be 'linear' or 'spherical'.")
        generator, _ = cache.get(generator_dir())
        z = sampling.interpolation_latents(seed_a, seed_b, steps, generator.z_dim, mode)
        return grid_image(sampling.generate(generator, z), columns=steps)

    def download():
        directory = generator_dir()
        files = [os.path.join(directory, n) for n in ("generator.safetensors", "generator.json")]
        if not all(os.path.exists(f) for f in files):
            raise gr.Error("No generator has been saved yet.")
        return files

    with gr.Row():
        seed = gr.Number(value=0, precision=0, label="Seed", minimum=0)
        count = gr.Slider(1, MAX_GRID, value=64, step=1, label="Count")
        sample_button = gr.Button("Sample", variant="primary")
    caption = gr.Markdown()
    grid = gr.Image(label="Samples", format="png", type="numpy", interactive=False)
    with gr.Row():
        seed_a = gr.Number(value=1, precision=0, label="Seed A", minimum=0)
        seed_b = gr.Number(value=2, precision=0, label="Seed B", minimum=0)
        strip_steps = gr.Slider(2, MAX_STRIP, value=10, step=1, label="Steps")
        mode = gr.Radio(["linear", "spherical"], value="spherical", label="Interpolation")
        interpolate_button = gr.Button("Interpolate")
    strip = gr.Image(label="Interpolation", format="png", type="numpy", interactive=False)
    with gr.Row():
        download_button = gr.Button("Download generator")
        files = gr.File(label="Generator (safetensors + config JSON)", file_count="multiple")

    sample_button.click(sample, [seed, count], [grid, caption], api_name="sample")
    interpolate_button.click(interpolate, [seed_a, seed_b, strip_steps, mode], strip, api_name="interpolate")
    download_button.click(download, None, files, api_name="download_generator")
    return {"grid": grid, "sample": sample, "seed": seed, "count": count, "caption": caption}

