"""The Sample tab's server-side checks, calling its handlers directly (no server, no page).

The page's widgets carry their own limits, so a check that only a script reaches is tested here,
where nothing stands between the input and the project's own refusal. The tab samples the shipped
generator: its runs folder is empty. `named_tab`'s server has one run, whose generator is the
shipped one with its classes named (as a folder's class subfolders name them), and two grids.
"""
import os
import re


import gradio as gr
import pytest

from app.job import SHIPPED_GENERATOR, Job
from app.live import LiveFeed
from app.sample_tab import (DIRECTION_RANGE, FOLLOW, KEEP_OUTPUTS, MAX_GRID, MAX_NEIGHBOURS, MAX_OUTPUTS, MAX_STRIP,
                            MAX_ZIP, SEED_MAX, SHIPPED, OutputFolders, SampleTab)
from app.ui import DeviceCache, TrainTab
from core import sample as sampling
from core.rundir import RunDir
from tests.apphelpers import seed_finished_run

HOST_KEY = "the-host-key"
SHIPPED_CLASSES = sampling.read_spec(os.path.join(SHIPPED_GENERATOR, "generator.json"))[0].classes


@pytest.fixture(scope="module")
def device_cache():
    return DeviceCache()     # one device probe for the whole file


def _tab_and_job(runs_root: str, device_cache) -> tuple[SampleTab, Job]:
    job = Job(runs_root=runs_root)
    host = TrainTab(job, LiveFeed(job), device_cache, HOST_KEY)   # the page's own host check, as build_app wires it
    return SampleTab(job.generator_dir, runs=job.runs_with_generators, require_host=host.require_host,
                     host_key_set=True), job


@pytest.fixture
def tab(tmp_path, device_cache):
    tab, job = _tab_and_job(str(tmp_path), device_cache)
    yield tab
    job.shutdown()


@pytest.fixture(scope="module")
def untouched_tab(tmp_path_factory, device_cache):
    """One tab for the tests that only read from it (refusals, samples of the shipped generator): a
    tab is laid out anew for each `tab`, the most of such a test's time."""
    tab, job = _tab_and_job(str(tmp_path_factory.mktemp("runs")), device_cache)
    yield tab
    job.shutdown()


CLASS_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
NAMED_STEP = 200


def run_with_named_classes(root: str) -> RunDir:
    """A run whose generator is the shipped one saved at NAMED_STEP with CLASS_NAMES, and its grids."""
    return seed_finished_run(root, CLASS_NAMES, NAMED_STEP, grid_steps=(100, NAMED_STEP), tiles=4)


@pytest.fixture
def named_tab(tmp_path):
    """(tab, run): the Sample tab of a server whose current run is run_with_named_classes."""
    root = str(tmp_path / "named")          # not `tab`'s runs folder: that one stays empty
    run = run_with_named_classes(root)
    job = Job(runs_root=root)               # attaches the newest run, as a restarted server does
    yield SampleTab(job.generator_dir, run_dir=lambda: job.run.path if job.run else None,
                    runs=job.runs_with_generators), run
    job.shutdown()


NO_DIRECTION = (0.0,) * 5
OUT_OF_RANGE = {
    "seed below 0": ("sample", (FOLLOW, -1, 4), "Seed must be between 0 and"),
    "seed past the largest": ("sample", (FOLLOW, SEED_MAX + 1, 4), "Seed must be between 0 and"),
    "seed not whole": ("sample", (FOLLOW, 2.5, 4), "Seed must be a whole number"),
    "grid too large": ("sample", (FOLLOW, 0, MAX_GRID + 1), f"Count must be between 1 and {MAX_GRID:,}"),
    "no samples": ("sample", (FOLLOW, 0, 0), f"Count must be between 1 and {MAX_GRID:,}"),
    "zip too large": ("download_samples", (FOLLOW, 9, 100000), f"Count must be between 1 and {MAX_ZIP:,}"),
    "strip too long": ("interpolate", (FOLLOW, 1, 2, MAX_STRIP + 1, "linear"),
                       f"Steps must be between 2 and {MAX_STRIP:,}"),
    "GIF of one step": ("interpolation_gif", (FOLLOW, 1, 2, 1, "linear"), f"Steps must be between 2 and {MAX_STRIP:,}"),
    "unknown mode": ("interpolate", (FOLLOW, 1, 2, 5, "cubic"), "Interpolation must be 'linear' or 'spherical'"),
    "psi too large": ("explore", (FOLLOW, 0, 7.0, *NO_DIRECTION), "Truncation psi must be between 0.0 and 2.0 \\(got 7.0\\)"),
    "psi not a number": ("explore", (FOLLOW, 0, float("nan"), *NO_DIRECTION), "Truncation psi must be between"),
    "direction too far": ("explore", (FOLLOW, 0, 1.0, DIRECTION_RANGE + 1, 0, 0, 0, 0),
                          f"Direction 1 must be between {-DIRECTION_RANGE} and {DIRECTION_RANGE}"),
    "too many neighbours": ("neighbours", (FOLLOW, 0, 1.0, MAX_NEIGHBOURS + 1, *NO_DIRECTION),
                            f"Neighbours must be between 1 and {MAX_NEIGHBOURS:,}"),
}


@pytest.mark.parametrize("handler, inputs, message", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_numbers_out_of_range_are_refused_with_the_projects_message(untouched_tab, handler, inputs, message):
    with pytest.raises(gr.Error, match=message) as refused:
        getattr(untouched_tab, handler)(*inputs)
    assert refused.value.title == "Check the value"   # its kind, for the log and an API caller (the page heads the toast "Not done")


def test_a_class_the_generator_lacks_is_refused(untouched_tab):
    missing = str(SHIPPED_CLASSES)
    wrong = f"{missing} is not one of this generator's classes \\(0 to {SHIPPED_CLASSES - 1}\\)"
    with pytest.raises(gr.Error, match=f"Class: {wrong}") as refused:
        untouched_tab.sample(FOLLOW, 0, 10, missing)
    assert refused.value.title == "Check the class"
    with pytest.raises(gr.Error, match=f"Class B: {wrong}"):
        untouched_tab.interpolate(SHIPPED, 1, 2, 5, "linear", "0", missing)
    # A class it has is drawn, and the caption says so and names the generator.
    _, caption = untouched_tab.sample(FOLLOW, 0, 10, str(SHIPPED_CLASSES - 1))
    assert f"Every sample is class {SHIPPED_CLASSES - 1}" in caption and "the shipped generator" in caption


def test_a_run_that_is_not_on_the_server_is_refused(untouched_tab):
    gone = "There is no run no-such-run with a generator on this server"
    with pytest.raises(gr.Error, match=gone):
        untouched_tab.pick_generator("no-such-run")
    with pytest.raises(gr.Error, match=gone):
        untouched_tab.sample("no-such-run", 0, 4)
    with pytest.raises(gr.Error, match=gone):
        untouched_tab.download_generator("no-such-run")


def test_the_shipped_generator_has_no_timelapse(untouched_tab):
    with pytest.raises(gr.Error, match="No training grids yet"):
        untouched_tab.timelapse(SHIPPED)


def test_the_generator_everyone_sees_changes_only_with_the_host_key(tab):
    upload = [os.path.join(SHIPPED_GENERATOR, name) for name in ("generator.safetensors", "generator.json")]
    with pytest.raises(gr.Error, match="Only the host can"):
        tab.upload_generator(upload, "")
    assert "the shipped generator" in tab.sample(FOLLOW, 0, 2)[1]      # still the job's own
    # Two files of the wrong kind are refused with the reason, even for the host.
    with pytest.raises(gr.Error, match="Upload exactly two files"):
        tab.upload_generator([upload[1], upload[1]], HOST_KEY)
    assert "Using the uploaded generator" in tab.upload_generator(upload, HOST_KEY)
    assert "the uploaded generator" in tab.sample(FOLLOW, 0, 2)[1]
    with pytest.raises(gr.Error, match="Only the host can"):
        tab.use_run_generator("wrong")
    assert "the uploaded generator" in tab.sample(FOLLOW, 0, 2)[1]
    assert re.match("Using the run's generator", tab.use_run_generator(HOST_KEY))
    assert "the shipped generator" in tab.sample(FOLLOW, 0, 2)[1]


def test_a_file_served_again_becomes_the_newest_and_is_not_the_next_to_go():
    """The timelapse of unchanged grids is served again from its file: under a flood of other
    outputs, the old file was deleted before its viewer fetched it (bench_soak: a 403)."""
    outputs = OutputFolders(serve_seconds=0)     # the count limit alone
    timelapse = outputs.path("timelapse.gif")
    open(timelapse, "w").close()
    for i in range(KEEP_OUTPUTS - 1):
        outputs.path(f"other-{i}.zip")
    assert outputs.reuse(timelapse)
    outputs.path("one-more.zip")          # without the reuse, the timelapse would go now
    assert os.path.exists(timelapse)
    for i in range(KEEP_OUTPUTS):
        outputs.path(f"later-{i}.zip")
    assert not os.path.exists(timelapse) and not outputs.reuse(timelapse)


def test_outputs_younger_than_the_serving_time_stay_up_to_the_hard_limit():
    """A slow viewer's file outlives a flood of others' for a while, and the folder stays bounded."""
    outputs = OutputFolders(serve_seconds=600)
    made = []
    for i in range(MAX_OUTPUTS):
        made.append(outputs.path(f"f{i}.zip"))
        open(made[-1], "w").close()
    assert all(os.path.exists(p) for p in made)          # all young: none deleted past KEEP_OUTPUTS
    newer = outputs.path("one-more.zip")
    assert not os.path.exists(made[0]) and all(os.path.exists(p) for p in made[1:])
    assert os.path.isdir(os.path.dirname(newer))


def test_every_output_names_the_generator_that_made_it(named_tab):
    """Not only the main caption: the zip, the strip and GIF and the generator's files (whose labels
    the page sets from the second value), the directions and the neighbours say whose they are; the
    timelapse and a grid at a step, the run's own, name the run."""
    tab, run = named_tab
    who = f"run {run.name} at step {NAMED_STEP}, the live run's newest checkpoint"
    assert f"Generator: {who}." in tab.sample(FOLLOW, 0, 4)[1]
    zipped, made_by = tab.download_samples(FOLLOW, 0, 4, "7")
    assert made_by == who and zipped.endswith("blink-seed0-class7-4.zip") and os.path.exists(zipped)
    strip, made_by = tab.interpolate(FOLLOW, 1, 2, 3, "linear")
    assert made_by == who and strip.shape[:2] == (32, 3 * 30 + 2)
    preview, gif, made_by = tab.interpolation_gif(FOLLOW, 1, 2, 3, "linear")
    assert made_by == who and preview == gif and gif.endswith(".gif")
    files, made_by = tab.download_generator(FOLLOW)
    assert made_by == who and sorted(map(os.path.basename, files)) == ["generator.json", "generator.safetensors"]
    assert f"Generator: {who}." in tab.explore(FOLLOW, 0, 1.0, *NO_DIRECTION)[1]
    assert f"Generator: {who}." in tab.neighbours(FOLLOW, 0, 1.0, 2, *NO_DIRECTION)[1]
    assert f"Run {run.name}'s fixed-noise grids: 2 grids" in tab.timelapse(FOLLOW)[tab.timelapse_caption]
    assert f"Run {run.name}'s grid at step 100" in tab.grid_at(FOLLOW, 90)[1]
    # Another viewer's pick of the shipped generator is said in its outputs too.
    assert tab.interpolate(SHIPPED, 1, 2, 3, "linear")[1].startswith("the shipped generator")


def test_captions_call_a_named_class_by_its_name_and_a_digit_by_its_index(named_tab, tab):
    named, _ = named_tab
    assert "Every sample is class 'seven'." in named.sample(FOLLOW, 0, 4, "7")[1]
    assert "each column is one class, starting from class 'three' (seed mod 10)" in named.sample(FOLLOW, 3, 10)[1]
    # MNIST's digits (the shipped generator names none) stay digits.
    assert "Every sample is class 7." in tab.sample(FOLLOW, 0, 4, "7")[1]
    assert "starting from class 3 (seed mod 10)" in tab.sample(FOLLOW, 3, 10)[1]


def test_leaving_the_generator_picker_without_a_pick_changes_nothing(named_tab):
    """Escape, or a click elsewhere, reaches the server as an input of the picker's value (none,
    or the generator already shown): the viewer keeps their generator and no work is done."""
    tab, run = named_tab
    for picked, view in ((None, FOLLOW), ("", FOLLOW), (SHIPPED, SHIPPED), (run.name, run.name)):
        assert tab.pick_generator(picked, 0, 4, "seed", view) == {tab.pick: gr.update(
            value=None if view == FOLLOW else view)}, (picked, view)
    # A real pick still moves this viewer to it.
    picked = tab.pick_generator(SHIPPED, 0, 4, "seed", FOLLOW)
    assert picked[tab.view] == SHIPPED and "the shipped generator" in picked[tab.caption]


def test_a_timelapse_refusal_says_what_went_wrong(named_tab, tmp_path):
    tab, run = named_tab
    with pytest.raises(gr.Error, match="No training grids yet: .* and the shipped generator has none"):
        tab.timelapse(SHIPPED)
    # A grid that goes between listing and reading (the run deleted to make room; here a dangling link).
    os.symlink(str(tmp_path / "gone.png"), os.path.join(run.path, "grids", "step_000050.png"))
    with pytest.raises(gr.Error, match=f"Run {run.name}'s grids are gone from this server"):
        tab.grid_at(FOLLOW, 50)
    with pytest.raises(gr.Error, match="Grid at step must be between 0"):
        tab.grid_at(FOLLOW, -1)
    # A live run before its first grid says when that comes.
    for _, path in run.grids():
        os.remove(path)
    with pytest.raises(gr.Error, match=f"No training grids yet: run {run.name} has drawn none "
                                       "\\(the first comes with its first step\\)"):
        tab.timelapse(FOLLOW)
