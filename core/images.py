"""Pixels between the model and files: the one place that converts, tiles and encodes images.

The model works in float [-1, 1] (the generator ends in tanh); datasets, PNGs and GIFs hold
uint8 [0, 255]. Every conversion goes through to_model_range / to_uint8, so a grid, a download
and a nearest-neighbour search agree to the grey level. Nothing here writes a file: callers
write the bytes with core.rundir.write_atomic.
"""
from __future__ import annotations

import io

import numpy as np


def to_model_range(images):
    """uint8 [0, 255] tensor -> float32 [-1, 1]; a float tensor (already in range) comes back as float32."""
    import torch   # here, not at the top: core.rundir imports this module, and its readers need no torch
    if images.dtype != torch.uint8:
        return images.float()
    return images.float().div(127.5).sub(1.0)


def to_uint8(images) -> np.ndarray:
    """(N, C, H, W) floats in [-1, 1] -> (N, H, W, C) uint8 (out-of-range values clipped)."""
    x = np.asarray(images, dtype=np.float32)
    return ((np.clip(x, -1, 1) + 1) * 127.5).round().astype(np.uint8).transpose(0, 2, 3, 1)


def grid_image(images, columns: int = 8, padding: int = 2) -> np.ndarray:
    """(N, C, H, W) floats in [-1, 1] -> one uint8 tiled image: (H', W') grey or (H', W', 3) colour."""
    pixels = to_uint8(images)
    n, h, w, c = pixels.shape
    rows = -(-n // columns)
    canvas = np.zeros((rows * (h + padding) + padding, columns * (w + padding) + padding, c), np.uint8)
    for i in range(n):
        r, col = divmod(i, columns)
        y0, x0 = padding + r * (h + padding), padding + col * (w + padding)
        canvas[y0:y0 + h, x0:x0 + w] = pixels[i]
    return canvas[..., 0] if c == 1 else canvas


def pil_image(pixels: np.ndarray, scale: int = 1):
    """uint8 (H, W), (H, W, 1) or (H, W, 3) -> a PIL image, optionally enlarged without blurring."""
    from PIL import Image
    img = Image.fromarray(pixels[..., 0] if pixels.ndim == 3 and pixels.shape[-1] == 1 else pixels)
    return img.resize((img.width * scale, img.height * scale), Image.NEAREST) if scale > 1 else img


def png_bytes(pixels: np.ndarray) -> bytes:
    """uint8 (H, W[, C]) -> a lossless PNG file's bytes."""
    buffer = io.BytesIO()
    pil_image(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def gif_bytes(frames: list[np.ndarray], duration_ms: int | list[int] = 80, scale: int = 1) -> bytes:
    """An endlessly looping animated GIF from uint8 (H, W[, C]) frames. duration_ms: one value, or one per frame."""
    if not frames:
        raise ValueError("no frames to animate")
    images = [pil_image(f, scale).convert("RGB") for f in frames]
    buffer = io.BytesIO()
    # disposal=1 and optimize=False keep every frame: PIL would otherwise merge identical ones.
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms,
                   loop=0, disposal=1, optimize=False)
    return buffer.getvalue()
