"""Build the benchmark image set: Noto Color Emoji rendered to 64x64 PNGs, a folder per emoji group.

A colour set made by someone else, shaped like a user's own folder (64x64 RGB, a few hundred to
a few thousand images, torchvision's ImageFolder layout that core/data/own.py reads as classes):
    OUT/<group>/<nnnn>-<name>.png     e.g. OUT/animals-nature/2318-dog-face.png
The fully-qualified emoji of Unicode's emoji-test.txt (3,655 in Debian 12's Emoji 15.0; 3,641
images, as 14 are drawn like another) in its nine groups: activities, animals-nature, flags,
food-drink, objects, people-body (2,142, most of them skin-tone variants), smileys-emotion,
symbols, travel-places. Each glyph is drawn from the font's own colour bitmaps, cropped to its
ink, centred with a margin and composited onto white. `--limit N` takes N of them spread evenly
over the groups (and within each group), the same N every time: 300 and 1,000 for the small-set
benchmarks, all of them for the largest (there are not 5,000). OUT/SOURCE.txt says what the set
is, where it came from and under which licence.

Sources (Debian and Ubuntu packages; nothing is downloaded by this script):
    fonts-noto-color-emoji   the images: /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf,
                             Google's Noto Emoji, "Files: fonts/* ... License: SIL-1.1" (the SIL
                             Open Font License 1.1) in /usr/share/doc/fonts-noto-color-emoji/copyright
    unicode-data             the list and groups: /usr/share/unicode/emoji/emoji-test.txt, under
                             the Unicode, Inc. License Agreement - Data Files and Software
Install them (as root) with:
    apt-get install -y fonts-noto-color-emoji unicode-data
Run from anywhere (Pillow is the only Python package it needs):
    python tools/build_benchmark_set.py [OUT] [--limit N] [--no-classes]
OUT defaults to ~/.cache/blink/benchmark/noto-emoji (noto-emoji-N with --limit N). Then train:
    python -m core.train --dataset folder --data-path OUT
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import time

FONT_PATH = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"
EMOJI_LIST_PATH = "/usr/share/unicode/emoji/emoji-test.txt"
INSTALL_COMMAND = "apt-get install -y fonts-noto-color-emoji unicode-data"
LICENCE = ("images: Noto Color Emoji (Google), SIL Open Font License 1.1, from Debian's "
           "fonts-noto-color-emoji (/usr/share/doc/fonts-noto-color-emoji/copyright); "
           "emoji list and groups: Unicode emoji-test.txt, Unicode, Inc. License Agreement - Data Files "
           "and Software, from Debian's unicode-data (/usr/share/doc/unicode-data/copyright)")
DEFAULT_ROOT = os.path.join("~", ".cache", "blink", "benchmark")
SET_NAME = "noto-emoji"
# The tool's own file in every set it builds: how a later build knows that the folder's PNGs are
# its own to replace, and what a reader of the folder learns about the images' origin.
MARKER = "SOURCE.txt"

# The font's one bitmap strike (CBDT): FreeType loads a colour bitmap font at no other size.
FONT_SIZE = 109
SIZE = 64                         # core/data/own.py's OWN_RESOLUTION: loaded without resampling
MARGIN = 3                        # pixels of background around the glyph's ink at 64x64
BACKGROUND = (255, 255, 255, 255)
# core/data/own.py's MIN_CLASS_IMAGES (not imported: this tool needs only Pillow): a smaller
# class folder is refused by the loader, so a --limit that would make one is refused here.
MIN_CLASS_IMAGES = 10

# emoji-test.txt's groups as folder names (sorted, they are the classes' order). Its "Component"
# group (bare skin tones and hair styles) is no picture of a thing and is left out.
GROUP_FOLDERS = {
    "Smileys & Emotion": "smileys-emotion",
    "People & Body": "people-body",
    "Animals & Nature": "animals-nature",
    "Food & Drink": "food-drink",
    "Travel & Places": "travel-places",
    "Activities": "activities",
    "Objects": "objects",
    "Symbols": "symbols",
    "Flags": "flags",
}


class SourceMissing(Exception):
    """A source file is not on this machine: the message names the package to install."""


def missing_sources() -> list[str]:
    """The packages whose file this tool reads is not on this machine (none: it can build)."""
    return [package for package, path in (("fonts-noto-color-emoji", FONT_PATH), ("unicode-data", EMOJI_LIST_PATH))
            if not os.path.exists(path)]


def check_sources() -> None:
    missing = missing_sources()
    if missing:
        raise SourceMissing(f"the emoji set is drawn from Debian's {' and '.join(missing)} "
                            f"({', '.join(p for p in (FONT_PATH, EMOJI_LIST_PATH) if not os.path.exists(p))} "
                            f"not found). Install the sources (as root) with: {INSTALL_COMMAND}")


def read_emoji_list(path: str) -> list[tuple[str, str, str]]:
    """(group folder, emoji string, name) of every fully-qualified emoji, in the file's order.

    Only fully-qualified lines: the minimally- and unqualified ones are the same pictures again."""
    emoji, group = [], None
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("# group:"):
                group = GROUP_FOLDERS.get(line.split(":", 1)[1].strip())
                continue
            code, sep, rest = line.partition(";")
            if not sep or line.startswith("#") or group is None:
                continue
            status, _, comment = rest.partition("#")
            if status.strip() != "fully-qualified":
                continue
            text = "".join(chr(int(point, 16)) for point in code.split())
            # The comment reads "<emoji> E<version> <name>".
            name = comment.strip().split(" ", 2)[-1]
            emoji.append((group, text, name))
    return emoji


def spread_evenly(items: list, count: int) -> list:
    """`count` of `items` at evenly spaced positions, in their order (all of them if fewer)."""
    if count >= len(items):
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def choose(emoji: list[tuple[str, str, str]], limit: int | None) -> list[tuple[str, str, str]]:
    """`limit` emoji spread over the groups as evenly as they allow, and within each group over
    its subgroups (the file's order): the same set every time, with every group in it.

    A group smaller than its share gives its remainder to the others, so people-body's skin-tone
    variants fill the larger sets rather than crowding the small ones."""
    if limit is None or limit >= len(emoji):
        return list(emoji)
    by_group: dict[str, list] = {}
    for item in emoji:
        by_group.setdefault(item[0], []).append(item)
    quota, left = {}, limit
    # Fill the smallest groups first: each takes its fair share of what is left, or all it has.
    for done, group in enumerate(sorted(by_group, key=lambda g: len(by_group[g]))):
        share = left // (len(by_group) - done)
        quota[group] = min(share, len(by_group[group]))
        left -= quota[group]
    # Rounding leaves a few over: one more each for the groups that still have emoji to give.
    for group in sorted(by_group, key=lambda g: len(by_group[g]), reverse=True):
        if left and quota[group] < len(by_group[group]):
            quota[group] += 1
            left -= 1
    chosen = {item for group in by_group for item in spread_evenly(by_group[group], quota[group])}
    return [item for item in emoji if item in chosen]


def load_font():
    """The emoji font at its bitmap size (Pillow imported here: --help needs no Pillow)."""
    from PIL import ImageFont
    return ImageFont.truetype(FONT_PATH, FONT_SIZE)


def render(font, text: str, single_width: float):
    """The emoji as a 64x64 RGB image on white, or None when the font has no one glyph for it.

    A sequence the font (or a Pillow without libraqm) cannot join into one glyph lays out as
    several side by side: a picture of two things, which no class should learn."""
    from PIL import Image, ImageDraw
    if font.getlength(text) > 1.5 * single_width:
        return None
    pad = FONT_SIZE // 4
    canvas = Image.new("RGBA", (2 * FONT_SIZE, 2 * FONT_SIZE), (0, 0, 0, 0))
    ImageDraw.Draw(canvas).text((pad, pad), text, font=font, embedded_color=True)
    ink = canvas.getchannel("A").getbbox()
    if ink is None:
        return None
    glyph = canvas.crop(ink)
    # Square, so that no glyph is stretched; the margin keeps every glyph off the edges.
    side = round(max(glyph.size) * SIZE / (SIZE - 2 * MARGIN))
    square = Image.new("RGBA", (side, side), BACKGROUND)
    square.alpha_composite(glyph, ((side - glyph.width) // 2, (side - glyph.height) // 2))
    # Composited before resizing, so the glyph's soft edges blend into the background rather
    # than into the transparent black around them.
    return square.convert("RGB").resize((SIZE, SIZE), Image.Resampling.LANCZOS)


def file_name(index: int, name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60]
    return f"{index:04d}-{slug}.png"


def clear_output(out: str, folders=None) -> None:
    """Make `out` ready for a new set: new, empty, or one this tool built (its PNGs and its class
    `folders` removed; default: the emoji groups'). tools/build_sprite_set.py builds with it too.

    Refuses any other folder with files in it: the set is written as the folder's only images,
    and nothing a user put there is deleted."""
    if not os.path.isdir(out):
        if os.path.exists(out):
            raise SystemExit(f"{out} is a file, not a folder: name a new or empty folder.")
        return
    entries = os.listdir(out)
    if entries and MARKER not in entries:
        raise SystemExit(f"{out} is not empty and is not a set this tool built (no {MARKER}): "
                         f"name a new or empty folder.")
    for folder in GROUP_FOLDERS.values() if folders is None else folders:
        shutil.rmtree(os.path.join(out, folder), ignore_errors=True)
    for entry in entries:
        if entry.endswith(".png"):
            os.remove(os.path.join(out, entry))


def build(out: str, limit: int | None, classes: bool) -> tuple[dict[str, int], list[str], list[str]]:
    """Write the set into `out`. Returns the number of images per folder ("" for a flat set), the
    names of the emoji the font could not draw as one glyph, and of those drawn like an earlier one."""
    check_sources()
    font = load_font()
    every_emoji = read_emoji_list(EMOJI_LIST_PATH)
    # Numbered by place in the whole list, so an emoji has the same file name in every subset.
    number = {text: i for i, (_, text, _) in enumerate(every_emoji)}
    clear_output(out)
    single_width = font.getlength("\U0001F600")       # a plain one-glyph emoji: grinning face
    written: dict[str, int] = {}
    skipped, duplicates, seen = [], [], set()
    for group, text, name in choose(every_emoji, limit):
        image = render(font, text, single_width)
        if image is None:
            skipped.append(name)
            continue
        # A few flags are drawn alike (France and St. Martin): a second copy would only weigh
        # that picture double.
        pixels = hashlib.sha1(image.tobytes()).digest()
        if pixels in seen:
            duplicates.append(name)
            continue
        seen.add(pixels)
        folder = os.path.join(out, group) if classes else out
        os.makedirs(folder, exist_ok=True)
        image.save(os.path.join(folder, file_name(number[text], name)), optimize=True)
        key = group if classes else ""
        written[key] = written.get(key, 0) + 1
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as f:
        f.write(f"Built by Blink's tools/build_benchmark_set.py: {sum(written.values())} emoji of "
                f"{len(GROUP_FOLDERS)} groups, {SIZE}x{SIZE} RGB on white"
                f"{', a folder per group' if classes else ''}.\n"
                f"Font: {FONT_PATH}\nList: {EMOJI_LIST_PATH}\nLicence: {LICENCE}\n")
    return written, skipped, duplicates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help=f"folder to build the set in (default: {DEFAULT_ROOT}/"
                                               f"{SET_NAME}, or {SET_NAME}-N with --limit N)")
    parser.add_argument("--limit", type=int, help="at most this many images, spread evenly over the groups "
                                                  "(the same ones every time); default: all of them")
    parser.add_argument("--no-classes", action="store_true",
                        help="write every image in OUT itself, a set without classes (default: a folder per group)")
    args = parser.parse_args(argv)
    classes = not args.no_classes
    if args.limit is not None and args.limit < (len(GROUP_FOLDERS) * MIN_CLASS_IMAGES if classes else 1):
        parser.error(f"--limit {args.limit} is too small: with a folder per group each of the "
                     f"{len(GROUP_FOLDERS)} groups needs {MIN_CLASS_IMAGES} images to train as a class, so at "
                     f"least {len(GROUP_FOLDERS) * MIN_CLASS_IMAGES}; or add --no-classes")
    if args.out is None:
        args.out = os.path.join(DEFAULT_ROOT, SET_NAME + (f"-{args.limit}" if args.limit else ""))
    args.out = os.path.abspath(os.path.expanduser(args.out))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        written, skipped, duplicates = build(args.out, args.limit, classes=not args.no_classes)
    except SourceMissing as missing:
        print(f"build_benchmark_set: {missing}", file=sys.stderr)
        return 2
    total = sum(written.values())
    print(f"wrote {total:,} images ({SIZE}x{SIZE} RGB PNG on white) to {args.out} "
          f"in {time.monotonic() - started:.1f} s")
    if not args.no_classes:
        print(f"{len(written)} classes, a folder each: " + ", ".join(f"{g} {n}" for g, n in sorted(written.items())))
    if skipped:
        print(f"left out {len(skipped)} the font draws as more than one glyph: {', '.join(skipped[:5])}"
              + (", ..." if len(skipped) > 5 else ""))
    if duplicates:
        print(f"left out {len(duplicates)} drawn the same as another: {', '.join(duplicates[:5])}"
              + (", ..." if len(duplicates) > 5 else ""))
    print(f"source and licence: {LICENCE}")
    print(f"train on it: python -m core.train --dataset folder --data-path {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
