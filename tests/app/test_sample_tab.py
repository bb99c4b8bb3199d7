"""The Sample tab as a student uses it: the real app (python app.py), driven through its named API.

A class-conditional generator draws the class asked for (checked by the shipped MNIST
classifier); the caption names the generator shown; a viewer follows the live run by default
and may pick an earlier run, for their own page only.
"""
import json
import os
import re

import numpy as np
import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from core import quality
from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import ROOT, press_start, wait_for

pytestmark = pytest.mark.slow
TILE = 28 + 2          # core.images.grid_image: 28 px digits, 2 px apart
with open(os.path.join(ROOT, "assets", "generator", "generator.json")) as f:
    SHIPPED_STEP = json.load(f)["step"]


@pytest.fixture(scope="module")
def classifier():
    return quality.load_classifier()


def _tiles(path: str, columns: int) -> np.ndarray:
    """The digits of a grid PNG, (N, 28, 28) uint8, row by row."""
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"))
    rows = (pixels.shape[0] - 2) // TILE
    return np.stack([pixels[2 + r * TILE:2 + r * TILE + 28, 2 + c * TILE:2 + c * TILE + 28]
                     for r in range(rows) for c in range(columns)])


def _classes(classifier, path: str, columns: int) -> np.ndarray:
    return quality.classify(classifier, _tiles(path, columns))[1].argmax(1)


def _start(client, steps: int, checkpoint_every: int) -> str:
    message, _ = press_start(client, "bundled-mnist", "", "dcgan", "auto", 32, "fp32", "cpu", steps, 10, 250,
                             checkpoint_every, "auto")
    assert "Started run" in message
    return client.predict(api_name="/status")["run"]


def _wait(app, states, what: str) -> dict:
    return wait_for(lambda: (status := app.status())["state"] in states and status,
                    timeout=400, interval=0.3, what=what)


def test_the_class_picker_draws_the_chosen_digit_and_interpolation_morphs_classes(app, classifier):
    running = app
    client = running.client()
    # Picking the shipped generator needs no training; the caption says which generator it is.
    follow, _, picker, *_, caption = client.predict("shipped", api_name="/choose_generator")
    assert follow is False and f"the shipped generator (pre-trained, step {SHIPPED_STEP})" in caption
    assert [value for _, value in picker["choices"]][1:] == [str(c) for c in range(10)] and picker["interactive"]
    for wanted in range(10):
        image, caption = client.predict(wanted, 10, str(wanted), api_name="/sample")
        found = _classes(classifier, image, 10)
        assert (found == wanted).sum() >= 8, (wanted, found)        # ten samples of the asked digit
        assert f"Every sample is class {wanted}" in caption
    # Without a class, the seed decides: one class per column, 0 to 9 from seed 0.
    image, caption = client.predict(0, 10, "seed", api_name="/sample")
    assert (_classes(classifier, image, 10) == np.arange(10)).sum() >= 8 and "each column is one class" in caption
    with pytest.raises(AppError, match="12 is not one of this generator's classes"):
        client.predict(0, 10, "12", api_name="/sample")
    # Class A -> class B along seed A -> seed B: the strip's ends are exactly those single samples.
    strip = _tiles(client.predict(3, 7, 6, "linear", "2", "8", api_name="/interpolate"), 6)
    start, _ = client.predict(3, 1, "2", api_name="/sample")
    end, _ = client.predict(7, 1, "8", api_name="/sample")
    assert np.array_equal(strip[0], _tiles(start, 1)[0]) and np.array_equal(strip[-1], _tiles(end, 1)[0])
    assert not np.array_equal(strip[0], _tiles(client.predict(3, 1, "5", api_name="/sample")[0], 1)[0])


def test_the_caption_names_the_generator_and_follows_the_live_run(app):
    running, root = app, app.runs_root
    client = running.client()
    # Paused at its first log step, the run has no generator yet: the shipped one is shown, and said so.
    name = _start(client, steps=400, checkpoint_every=20)
    client.predict(api_name="/pause")
    paused = _wait(app, ("paused",) + FINAL_STATES, "the run to pause")
    assert paused["state"] == "paused" and paused["step"] < 20, paused
    _, caption = client.predict(0, 10, api_name="/sample")
    assert (f"run {name} has no generator yet (first at step 20); showing the shipped one "
            f"(pre-trained, step {SHIPPED_STEP})") in caption
    # Training again, the tab follows the run's newest checkpoint.
    client.predict(api_name="/resume")
    steps_seen = []

    def followed(newer_than: int):
        _, caption = client.predict(0, 10, api_name="/sample")
        shown = re.search(rf"run {name} at step (\d+), the live run's newest checkpoint", caption)
        if shown and int(shown.group(1)) > newer_than:
            steps_seen.append(int(shown.group(1)))
            return True
        assert client.predict(api_name="/status")["state"] not in FINAL_STATES, caption

    wait_for(lambda: followed(0), timeout=300, interval=0.2, what="the caption to show the live run")
    wait_for(lambda: followed(steps_seen[0]), timeout=300, interval=0.2, what="a newer checkpoint")
    client.predict(api_name="/stop")
    _wait(app, FINAL_STATES, "the run to stop")
    with open(os.path.join(root, name, "generator.json")) as f:
        saved = json.load(f)["step"]
    _, caption = client.predict(0, 10, api_name="/sample")
    assert f"run {name} at step {saved}." in caption and saved >= steps_seen[-1]


def _seed_runs(runs_root: str) -> tuple[RunDir, RunDir]:
    """Two finished runs as the picker finds them, nothing trained: an older class-conditional DCGAN
    (the shipped generator saved as its own, grids at steps 20 and 40) and a newer unconditional
    hinge run (a small untrained generator). Newest first is by name: the hinge run's sorts first
    even when both are made within one second."""
    from core.config import TrainConfig
    from tests.apphelpers import seed_finished_run
    from tests.filehelpers import save_generator_pair, tiny_generator
    older = seed_finished_run(runs_root, [str(c) for c in range(10)], 40, (20, 40), 60)
    newer = RunDir.create(TrainConfig(gan="hinge", conditional="off", steps=40), runs_root)
    save_generator_pair(newer.path, tiny_generator(), step=40, config={"gan": "hinge", "dataset": "bundled-mnist"})
    for run in (older, newer):
        run.write_status("done", "Finished 40 steps.", step=40, saved_step=40)
    return older, newer


def test_an_earlier_run_can_be_picked_by_one_viewer_only(app):
    """Seeded runs: what this shows is the picker's, not training's (a run saving its generator as
    it trains: test_the_caption_names_the_generator_and_follows_the_live_run)."""
    running = app
    older, newer = _seed_runs(app.runs_root)
    viewer, other = running.client(), running.client()
    _, before = other.predict(0, 10, api_name="/sample")
    follow, picker, digit, *_, caption = viewer.predict(older.name, api_name="/choose_generator")
    assert follow is False and f"run {older.name} at step 40 (your pick" in caption
    # The picker lists every run with a generator, newest first, with its step and GAN type.
    labels = dict((value, label) for label, value in picker["choices"])
    runs = [value for value in labels if value != "shipped"]
    assert runs.index(newer.name) < runs.index(older.name)
    assert "step 40, hinge, unconditional" in labels[newer.name] and "step 40, dcgan, 10 classes" in labels[older.name]
    assert digit["interactive"]
    # The pick is this viewer's: another page still shows what it showed (it follows the live run).
    _, caption = viewer.predict(0, 10, api_name="/sample")
    assert f"run {older.name} at step 40" in caption
    _, caption = other.predict(0, 10, api_name="/sample")
    assert caption == before and older.name not in caption
    # The picked run's timelapse plays on the page (an image, not only a file to download).
    gif, _, _, caption = viewer.predict(api_name="/timelapse")
    assert older.name in caption
    with Image.open(gif) as animation:
        assert animation.n_frames == len(older.grids()) > 1
    returns = viewer.view_api(print_info=False, return_format="dict")["named_endpoints"]["/timelapse"]["returns"]
    assert returns[0]["component"] == "Image"
    # An unconditional run: no class to pick, and asking for one says why.
    *_, digit, _, _, _, caption = viewer.predict(newer.name, api_name="/choose_generator")
    assert digit["interactive"] is False and "unconditional" in digit["info"]
    with pytest.raises(AppError, match="unconditional"):
        viewer.predict(0, 10, "3", api_name="/sample")
    with pytest.raises(AppError, match="no run no-such-run"):
        viewer.predict("no-such-run", api_name="/choose_generator")
    # Following again shows what every page that follows the live run shows.
    viewer.predict(True, api_name="/follow_live_run")
    _, caption = viewer.predict(0, 10, api_name="/sample")
    assert caption == before
