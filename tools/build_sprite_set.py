"""Build the second benchmark set: game sprites (Kenney's, CC0) as 64x64 PNGs, a folder per kind.

A colour set of another kind than the emoji set (tools/build_benchmark_set.py), made by someone
else and shaped like a user's own folder (torchvision's ImageFolder layout, core/data/own.py):
    OUT/<class>/<name>.png     e.g. OUT/cards/cardHearts7.png
Seven classes a person names at a glance: cards (playing cards, faces and backs), characters (six
figures in their walk and climb poses), tank-parts (top-down tanks, barrels and tracks), and four
kinds of platform tiles by ground: dirt, grass, sand, snow. Each sprite keeps its proportions, is
fitted into 64x64 with a margin and composited onto white.

Source: the Python Arcade library's wheel (PyPI `arcade`, its bundled resources from Kenney,
www.kenney.nl: "Everything in this package is licensed CC0", their License.txt). Fetch the wheel
without installing it, then build from it (Pillow is the only package this needs):
    pip download arcade==3.3.3 --no-deps -d /tmp/arcade
    python tools/build_sprite_set.py /tmp/arcade/arcade-3.3.3-py3-none-any.whl [OUT]
OUT defaults to ~/.cache/blink/benchmark/kenney-sprites. Then train:
    python -m core.train --dataset folder --data-path OUT
"""
from __future__ import annotations

import argparse
import io
import os
import re
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The benchmark sets' shared shape (64x64 on white, a margin) and their tools' marker file and guard.
from tools.build_benchmark_set import MARGIN, MARKER, SIZE, clear_output  # noqa: E402

IMAGES = "arcade/resources/assets/images/"
# Class -> the wheel's files under IMAGES that belong to it (a regular expression on the path).
CLASSES = {
    "cards": r"cards/card.*\.png",
    "characters": r"animated_characters/[^/]+/.*\.png",
    "tank-parts": r"topdown_tanks/tank.*\.png",
    "dirt-tiles": r"tiles/dirt.*\.png",
    "grass-tiles": r"tiles/grass.*\.png",
    "sand-tiles": r"tiles/sand.*\.png",
    "snow-tiles": r"tiles/snow.*\.png",
}
LICENCE = ("Kenney's game sprites (www.kenney.nl), CC0 1.0 (their License.txt), as bundled in the Python "
           "Arcade library's wheel (PyPI arcade)")


def sprite(data: bytes):
    """The sprite fitted into SIZE x SIZE (its proportions kept) on white, RGB."""
    from PIL import Image
    with Image.open(io.BytesIO(data)) as image:
        rgba = image.convert("RGBA")
    box = rgba.getbbox() or (0, 0, *rgba.size)   # cropped to what is drawn
    rgba = rgba.crop(box)
    scale = (SIZE - 2 * MARGIN) / max(rgba.size)
    rgba = rgba.resize((max(1, round(rgba.width * scale)), max(1, round(rgba.height * scale))), Image.LANCZOS)
    canvas = Image.new("RGBA", (SIZE, SIZE), (255, 255, 255, 255))
    canvas.alpha_composite(rgba, ((SIZE - rgba.width) // 2, (SIZE - rgba.height) // 2))
    return canvas.convert("RGB")


def build(wheel: str, out: str) -> dict[str, int]:
    clear_output(out, CLASSES)
    counts = {}
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(n for n in archive.namelist() if n.startswith(IMAGES))
        for label, pattern in CLASSES.items():
            members = [n for n in names if re.fullmatch(IMAGES + pattern, n)]
            os.makedirs(os.path.join(out, label), exist_ok=True)
            for name in members:
                sprite(archive.read(name)).save(os.path.join(out, label, os.path.basename(name)))
            counts[label] = len(members)
    with open(os.path.join(out, MARKER), "w") as f:
        f.write(f"{sum(counts.values())} images in {len(counts)} classes, {SIZE}x{SIZE} RGB on white, built by "
                f"tools/build_sprite_set.py from {os.path.basename(wheel)}.\nLicence: {LICENCE}.\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", help="the arcade wheel (pip download arcade==3.3.3 --no-deps -d DIR)")
    parser.add_argument("out", nargs="?", default=os.path.expanduser("~/.cache/blink/benchmark/kenney-sprites"))
    args = parser.parse_args()
    counts = build(args.wheel, args.out)
    print(", ".join(f"{label} {n}" for label, n in counts.items()) + f": {sum(counts.values())} images in {args.out}")
    print(f"train on it: {sys.executable} -m core.train --dataset folder --data-path {args.out}")


if __name__ == "__main__":
    main()
