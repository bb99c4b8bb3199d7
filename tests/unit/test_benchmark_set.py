"""The benchmark set that someone else made (tools/build_benchmark_set.py: Noto Color Emoji in
folders by emoji group) builds as a user builds it and trains class-conditional through the CLI.

Real Debian packages, the real tool and trainer as subprocesses, a private dataset cache.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from PIL import Image

from core.data.own import MIN_CLASS_IMAGES
from tests.clihelpers import run_cli
from tools import build_benchmark_set
from tools.build_benchmark_set import GROUP_FOLDERS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = 200                       # 22 or 23 per group: above the loader's 10 per class
STEPS, QUALITY_EVERY = 12, 4

pytestmark = [pytest.mark.slow, pytest.mark.needs("emoji font")]


def test_the_emoji_set_builds_as_64px_colour_class_folders_and_trains_with_its_classes_named(tmp_path):
    # The tool refuses a --limit that leaves a class smaller than the loader accepts: the same size.
    assert build_benchmark_set.MIN_CLASS_IMAGES == MIN_CLASS_IMAGES
    folder, run = tmp_path / "emoji", tmp_path / "run"
    env = dict(os.environ, BLINK_DATA_DIR=str(tmp_path / "cache"), BLINK_OFFLINE="1")
    # One torch thread unless told otherwise: on a busy 2-core machine a second one spinning for
    # work made this run several times slower (.ci/run sets the same).
    env.setdefault("OMP_NUM_THREADS", "1")
    built = subprocess.run([sys.executable, "tools/build_benchmark_set.py", str(folder), "--limit", str(IMAGES)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "SIL Open Font License 1.1" in built.stdout and (folder / "SOURCE.txt").exists()

    classes = sorted(GROUP_FOLDERS.values())
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == classes
    pngs = sorted(folder.glob("*/*.png"))
    assert len(pngs) == IMAGES
    for png in pngs:
        with Image.open(png) as image:
            assert (image.size, image.mode) == ((64, 64), "RGB"), png.name
            # Composited onto white, and a picture on it: not blank, not black on transparent black.
            low, high = zip(*image.getextrema())
            assert image.getpixel((0, 0)) == (255, 255, 255) and min(low) < 200, png.name

    trained = run_cli(["-m", "core.train", "--dataset", "folder", "--data-path", str(folder),
                       "--steps", str(STEPS), "--batch-size", "16", "--quality-every", str(QUALITY_EVERY),
                       "--device", "cpu", "--run-dir", str(run)], env=env, timeout=300)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "done", (status["message"], trained.stderr[-2000:])
    assert status["classes"] == len(classes) and status["class_names"] == classes
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    quality = [event["quality_swd"] for event in events if "quality_swd" in event]
    assert len(quality) == STEPS // QUALITY_EVERY and all(math.isfinite(q) and q > 0 for q in quality), quality
