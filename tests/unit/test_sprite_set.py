"""The second benchmark set (tools/build_sprite_set.py): sprites from a wheel's images, a folder per
class, each fitted into 64x64 on white with its proportions kept. The real tool on a small wheel of
the same layout (the real one is a 40 MB download, made on a machine that measures with it)."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from core.data.own import list_images, listed_classes
from tools import build_sprite_set
from tools.build_sprite_set import CLASSES, IMAGES, MARKER, SIZE


def _png(width: int, height: int, colour) -> bytes:
    image = Image.new("RGBA", (width + 20, height + 20), (0, 0, 0, 0))   # a transparent border to crop
    image.paste(Image.new("RGBA", (width, height), colour), (10, 10))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def test_the_sprites_of_each_class_become_64px_images_on_white_in_their_folder(tmp_path):
    wheel = tmp_path / "arcade.whl"
    examples = {"cards": "cards/cardHearts{}.png", "characters": "animated_characters/robot/robot_walk{}.png",
                "tank-parts": "topdown_tanks/tankBlue{}.png", "dirt-tiles": "tiles/dirtMid{}.png",
                "grass-tiles": "tiles/grassMid{}.png", "sand-tiles": "tiles/sandMid{}.png",
                "snow-tiles": "tiles/snowMid{}.png"}
    assert set(examples) == set(CLASSES)
    with zipfile.ZipFile(wheel, "w") as archive:
        for label, name in examples.items():
            for i in range(10):
                archive.writestr(IMAGES + name.format(i), _png(70, 140, (200, 30, 30, 255)))   # twice as tall as wide
        archive.writestr(IMAGES + "backgrounds/stars.png", _png(64, 64, (0, 0, 0, 255)))      # in no class
    out = tmp_path / "sprites"
    assert build_sprite_set.build(str(wheel), str(out)) == dict.fromkeys(CLASSES, 10)
    assert (out / MARKER).exists()
    pixels = np.asarray(Image.open(out / "cards" / "cardHearts0.png"))
    assert pixels.shape == (SIZE, SIZE, 3)
    drawn = np.argwhere((pixels != 255).any(axis=2))
    height, width = drawn.max(0) - drawn.min(0) + 1
    assert height == SIZE - 2 * build_sprite_set.MARGIN and width == pytest.approx(height / 2, abs=1)
    assert (pixels[0, 0] == 255).all()                                  # white around it
    listing = list_images(str(out))                                     # what a run reads: seven classes
    assert list(listed_classes(listing).names) == sorted(CLASSES) and len(listing.names) == 70
    with pytest.raises(SystemExit, match="not a set this tool built"):
        build_sprite_set.build(str(wheel), str(tmp_path))               # never over a folder of its own
