"""The studio end to end: the real app process, driven through its named API like a script would:
the Train tab's runs (and comparisons of them, at once and after), the Sample tab as a student uses
it, the host's controls (Step, Stop then Pause, a run over two processes, a trainer that cannot answer
Stop), and the disk an app may use.
The module's app serves every test but the last two, which start apps of their own."""
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from core import gans, quality
from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import (ROOT, Refused, RunningApp, alive, children_of, paused_beat, press_start, torch_loaded,
                              wait_for)
from tests.filehelpers import cpu_plan

pytestmark = pytest.mark.slow

# The module's app (tests/conftest.py). Its Stop watchdog ends a trainer silent (or stuck in one step)
# this long after a Stop: short, for the wedge below; a healthy trainer answers within a second or
# two and is never ended by it.
APP_ENV = {"OMP_NUM_THREADS": "1", "BLINK_STOP_ESCALATE": "3"}


@pytest.fixture(autouse=True)
def _no_run_left_training(request):
    """Each test on the module's app begins with no run training or paused: a test that fails with
    its run still going (or paused) leaves it to that test's report, not to every test after it."""
    if "app" in request.fixturenames:
        app = request.getfixturevalue("app")
        if app.process.poll() is None and app.status().get("state") not in ("", None, *FINAL_STATES):
            app.call("stop", "")
            wait_for(lambda: app.status().get("state") in FINAL_STATES, 60, what="the last test's run to stop")
    yield


def test_bad_settings_are_refused_before_any_process_starts(app):
    client = app.client()
    # The project's own checks answer, naming the field (the number boxes have no limits of their own;
    # each rule of the form is checked on the Train tab itself in tests/unit/test_train_tab.py).
    with pytest.raises(AppError, match=r"Batch size must be between 1 and 4,096 \(got -1\)"):   # 0: the type's
        client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=-1,
                       precision="fp32", device="auto", steps=50, api_name="/start")
    with pytest.raises(AppError, match="fp16"):   # refused on every CPU (bf16 depends on the CPU: AMX has it)
        client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=64,
                       precision="fp16", device="cpu", steps=50, api_name="/start")
    assert client.predict(api_name="/status")["run"] == ""   # no run directory was created


def test_a_bad_value_in_any_field_of_any_named_api_is_refused_naming_the_field(app):
    """Every named API's fields that Gradio checks (numbers, sliders, choices, checkboxes): a value
    the field cannot take is refused in the project's one line naming the field, not Gradio's
    "Could not preprocess input component at index N", and the server log gets no traceback."""
    client = app.client()
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    checked = []
    for name, endpoint in api.items():
        parameters = endpoint["parameters"]
        if any(p["component"] == "File" for p in parameters):
            continue   # the upload endpoints: the upload tests send them bad files
        defaults = {p["parameter_name"]: p["parameter_default"] if p["parameter_has_default"] else None
                    for p in parameters}
        for p in parameters:
            if p["component"] == "Textbox":
                continue   # text takes any string: the handlers check it
            for bad in ({"not": "a value"},):
                # Through the named API's REST road (the queue and handlers a gradio_client call
                # meets, without its client-side cost: dozens of calls).
                values = {**defaults, p["parameter_name"]: bad}
                try:
                    app.call(name.lstrip("/"), *(values[q["parameter_name"]] for q in parameters))
                    continue   # a field that takes any value (a picker of runs by name) and a handler that ignored it
                except Refused as refused:
                    message = refused.message
                # The field's name first; or, where the field lets any value through (a custom choice),
                # the handler's own refusal. Never Gradio's words, never more than one line.
                assert "Could not preprocess" not in message and "list of choices" not in message, (name, message)
                assert "\n" not in message, (name, message)
                checked.append((name, p["label"], message.startswith(f"{p['label']}: ")))
    named = [c for c in checked if c[2]]
    assert len({n for n, _, _ in named}) >= 12 and len(named) >= 30, checked
    log = app.read_log()
    assert "Traceback" not in log and "Could not preprocess" not in log, log[-3000:]


def test_previews_and_samples_are_drawn_without_torch_in_the_ui_process(app):
    """The UI process never loads torch (its memory): what needs torch runs in the trainer and the
    viewer-work process. Checked from outside, in the libraries mapped into the app's process."""
    client = app.client()
    note, preview = client.predict("bundled-mnist", "", api_name="/preview_dataset")
    assert "always available" in note and preview
    grid, caption = client.predict(3, 16, "seed", api_name="/sample")
    assert "16 samples, seed 3" in caption and grid
    assert not torch_loaded(app.process.pid)
    # The check sees torch where it is: in the processes the app started (viewer work, the trainer).
    assert any(torch_loaded(pid) for pid in children_of(app.process.pid))


def test_a_short_run_streams_events_and_grids_then_samples(app):
    client = app.client()
    message = client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=32,
                             precision="fp32", device="auto", steps=120, seed=7, api_name="/start")
    assert "Started run" in message
    seen_events, seen_grids = [], set()

    def finished():
        # Watched through the page's feed (cheap to ask), and through the named API each time
        # the feed says the run logged something new.
        status = app.status()
        if not seen_events or status["events"] != seen_events[-1]:
            seen_events.append(status["events"])
            grid = client.predict(api_name="/status").get("grid")
            if grid:
                seen_grids.add(grid)
        return status if status["state"] in ("done", "failed", "stopped") else None

    assert wait_for(finished, timeout=400, interval=0.5, what="the run to end")["state"] == "done"
    status = client.predict(api_name="/status")
    assert status["state"] == "done", status
    assert status["step"] == 120 and status["device"].startswith("CPU")
    # The event log grew while we watched, and every loss is finite.
    assert len(set(seen_events)) >= 3
    run_path = os.path.join(app.runs_root, status["run"])
    assert status["grid"] == f"live/grid/{status['run']}/120"   # a URL of this server, never a server path
    with open(os.path.join(run_path, "config.json")) as f:   # the form's values, the Advanced seed among them
        assert (json.load(f)["config"]["seed"], status["step"]) == (7, 120)
    with open(os.path.join(run_path, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    losses = [e for e in events if "loss_d" in e]
    assert [e["step"] for e in losses] == [1, 25, 50, 75, 100, 120]
    assert all(math.isfinite(e["loss_d"]) and math.isfinite(e["loss_g"]) for e in losses)
    # The quality curve got its early point (step 50) and one at the end (the shipped MNIST classifier).
    quality = [e for e in events if "quality_fd" in e]
    assert [e["step"] for e in quality] == [50, 120] and all(math.isfinite(q["quality_fd"]) for q in quality)
    # The phase line is core/phase.py's rules over this run's own events, written by its trainer.
    from core.phase import Phase
    assert status["phase"] == Phase(gans.get("dcgan"), True, events).line() and status["phase"].split(":")[0] in (
        "blobs", "strokes", "digits")
    # Grids every 10 steps early on, then every 100 and at the end, each kept (never overwritten).
    grid_files = sorted(os.listdir(os.path.join(run_path, "grids")))   # each with D's verdicts, and the real grid
    steps = (1, *range(10, 121, 10))
    assert grid_files == sorted([f"step_{s:06d}.{x}" for s in steps for x in ("png", "json")] + ["real.png"])
    assert len(seen_grids) >= 2
    with urllib.request.urlopen(app.url + status["grid"], timeout=30) as answer:
        png = answer.read()
    with Image.open(io.BytesIO(png)) as grid:   # class-conditional on MNIST's labels: a column per digit
        assert grid.size == (10 * 30 + 2, 6 * 30 + 2)            # 60 samples, 28 px + 2 px padding

    image_path, caption = client.predict(3, 16, api_name="/sample")
    with Image.open(image_path) as image:
        assert image.size == (10 * 30 + 2, 2 * 30 + 2)           # 16 samples in rows of 10 classes
    assert "Class-conditional" in caption
    assert "step 120" in caption
    strip_path = client.predict(1, 2, 5, "spherical", api_name="/interpolate")
    with Image.open(strip_path) as strip:
        assert strip.size == (5 * 30 + 2, 30 + 2)
    files = client.predict(api_name="/download_generator")
    assert sorted(os.path.basename(f) for f in files) == ["generator.json", "generator.safetensors"]

    # A comparison start: the finished run again with D's learning rate x10, the same seed and length,
    # now (nothing trains), shown beside it. Pressed while that trains: "after" waits for it to finish,
    # then starts (WGAN-GP) beside it; "at once" starts another beside the live run at once (on this
    # CPU each is asked for half the threads, the one left for all of them once the other ends, which
    # keeps no share; Pause reaches both). The app's trainers here have one thread each
    # (OMP_NUM_THREADS): a trainer taking its share is tests/unit/test_compare.py's.
    first = status["run"]

    def config(run):
        with open(os.path.join(app.runs_root, run, "config.json")) as f:
            values = json.load(f)
        return values.get("config", values)

    def run_dir(run):
        return RunDir(os.path.join(app.runs_root, run))

    def share(run):
        asked = run_dir(run).read_cpu_share()
        return asked and asked[0]
    half = max(1, len(os.sched_getaffinity(0)) // 2)
    assert "beside run" in client.predict("lr_d", "at once", api_name="/start_comparison")
    second = wait_for(lambda: (s := app.status())["run"] != first and s, 30, what="the comparison")
    assert second["compare"] == first
    assert "Queued" in client.predict("gan", "after", api_name="/start_comparison")
    assert second["run"] in client.predict(api_name="/status")["compare_note"]
    wait_for(lambda: os.path.exists(os.path.join(app.runs_root, second["run"], "config.json"))
             and "format" in open(os.path.join(app.runs_root, second["run"], "config.json")).read(), 60,
             what="the comparison's plan")
    planned = config(second["run"])
    assert (planned["lr_d"], planned["seed"], planned["steps"]) == (pytest.approx(10 * config(first)["lr_d"]), 7, 120)
    third = wait_for(lambda: (s := app.status())["run"] not in (first, second["run"]) and s,
                     400, interval=0.5, what="the queued comparison, once the first finished")
    assert third["compare"] == second["run"] and run_dir(second["run"]).read_status().state == "done"
    assert (config(third["run"])["gan"], config(third["run"])["seed"]) == ("wgan-gp", 7)
    wait_for(lambda: run_dir(third["run"]).read_status().step > 0, 60, what="its first step")

    answer = client.predict("lr_d", "at once", api_name="/start_comparison")
    if len(os.sched_getaffinity(0)) < 2:   # one core trains one run: the comparison waits for the live one instead
        assert "not at once: the CPU has one core" in answer, answer
        client.predict(api_name="/stop")
        wait_for(lambda: app.status()["state"] in ("stopped", "done"), 120, what="the stop")
        return
    assert f"at once beside run `{third['run']}`" in answer, answer
    fourth = app.status()
    assert fourth["run"] not in (first, second["run"], third["run"]) and fourth["compare"] == third["run"]
    assert share(third["run"]) == share(fourth["run"]) == half
    wait_for(lambda: run_dir(fourth["run"]).read_status().diagnostics.get("cpu_threads") == 1, 60,
             what="the comparison training")
    client.predict(api_name="/pause")
    wait_for(lambda: run_dir(third["run"]).read_status().state == run_dir(fourth["run"]).read_status().state
             == "paused", 60, what="both runs paused")
    client.predict(api_name="/resume")
    # The run beside stopped on its own (as a CLI user in another terminal stops it): the live run
    # trains on with every thread.
    run_dir(third["run"]).request("stop")
    wait_for(lambda: run_dir(third["run"]).read_status().state == "stopped" and share(fourth["run"]) == 0,
             120, interval=0.5, what="the run beside stopped, and every thread given back to the live run")
    assert share(third["run"]) is None
    client.predict(api_name="/stop")
    wait_for(lambda: app.status()["state"] in ("stopped", "done"), 120, what="the stop")


# ---- the Sample tab as a student uses it ------------------------------------------------------
# A class-conditional generator draws the class asked for (checked by the shipped MNIST classifier);
# the caption names the generator shown; a viewer follows the live run by default and may pick an
# earlier run, for their own page only. On the module's app, after the runs above.
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


def _wait(app, states, what: str) -> dict:
    return wait_for(lambda: (status := app.status())["state"] in states and status,
                    timeout=400, interval=0.3, what=what)


def test_the_class_picker_draws_the_chosen_digit_and_interpolation_morphs_classes(app, classifier):
    client = app.client()
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
    root = app.runs_root
    client = app.client()
    # Paused at once (through the REST road, milliseconds after Start: long before its first checkpoint
    # at step 100 on any machine), the run has no generator yet: the shipped one is shown, and said so.
    message, _ = press_start(client, dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto",
                                     batch_size=32, precision="fp32", device="cpu", steps=400, log_every=10,
                                     grid_every=250, checkpoint_every=100, conditional="auto")
    assert "Started run" in message
    app.call("pause", "")
    name = client.predict(api_name="/status")["run"]
    paused = _wait(app, ("paused",) + FINAL_STATES, "the run to pause")
    assert paused["state"] == "paused" and paused["step"] < 100, paused
    _, caption = client.predict(0, 10, api_name="/sample")
    assert (f"run {name} has no generator yet (first at step 100); showing the shipped one "
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
    newer = RunDir.create(cpu_plan(gan="hinge", conditional="off", steps=40), runs_root)
    save_generator_pair(newer.path, tiny_generator(), step=40, config={"gan": "hinge", "dataset": "bundled-mnist"})
    for run in (older, newer):
        run.write_status("done", "Finished 40 steps.", step=40, saved_step=40)
    return older, newer


def test_an_earlier_run_can_be_picked_by_one_viewer_only(app):
    """Seeded runs: what this shows is the picker's, not training's (a run saving its generator as
    it trains: test_the_caption_names_the_generator_and_follows_the_live_run)."""
    older, newer = _seed_runs(app.runs_root)
    viewer, other = app.client(), app.client()
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


# ---- the host's controls, each test a real run of its own, in turn ------------------------------
# - Step: a paused run advances exactly the generator updates asked for, with the grid and D's
#   verdicts before and after, and stays paused (the lesson's "watch one update change the fakes"),
#   with settings changed while paused (Change while training) from the first stepped update;
# - Stop, then Pause a moment later (issue 45): the Stop is kept, so every run ends "stopped" by
#   request with its last step saved, never paused and then killed by the Stop watchdog (the rules
#   themselves, raced a hundred times: tests/unit/test_requests.py);
# - Stop always ends a run: a trainer that cannot answer Stop is shown to every viewer as not
#   answering before anyone presses Stop, is ended by the app, Start works again, and the app's
#   processes all exit with it (last of the module's app: it stops the app).
FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=16, precision="fp32",
            device="cpu", steps=100000)


def test_step_and_ten_steps_while_paused_train_exactly_that_and_show_before_and_after(app):
    client = app.client()

    status = app.status

    assert client.predict(api_name="/step") == "No run is training."
    press_start(client, **FORM, log_every=5)
    wait_for(lambda: status()["state"] == "running" and status()["step"] >= 5, 120, what="the run")
    assert "Pause first" in client.predict(api_name="/step")   # a running run is not stepped
    client.predict(api_name="/pause")
    paused = wait_for(lambda: (s := status())["state"] == "paused" and s, 60, what="the pause")
    run = RunDir(os.path.join(app.runs_root, paused["run"]))
    # Settings changed while paused (Change while training): refused by the config's own check,
    # naming the field as the page does; taken, the stepped updates are the first to train with them.
    with pytest.raises(AppError, match=r"D's learning rate 5(\.0)? is out of range"):
        client.predict(lr_d=5, api_name="/change_settings")
    assert "Changing D's learning rate 0.001, D updates per G update 2" in client.predict(
        lr_d=1e-3, n_critic=2, api_name="/change_settings")

    # Then one update of D alone (Step trains: D alone): D learns, G stays as it was.
    for press, count, trains in (("/step", 1, "G and D"), ("/step_10", 10, "G and D"), ("/step", 1, "D alone")):
        before = status()
        assert "Stepping" in client.predict(step_trains=trains, api_name=press)
        after = wait_for(lambda: (s := status())["message"].startswith(f"Paused at step {before['step'] + count}:")
                         and s, 60, what=f"{press}")
        assert after["state"] == "paused" and after["step"] == before["step"] + count
        assert after["stepped_from"] == before["step"]
        # The grid and D's verdicts before the step and after it, for the page to show side by side.
        for step in (before["step"], after["step"]):
            assert run.has_grid(step) and len(run.read_verdicts(step)["fake"]) == 60
    with open(run.file("events.jsonl")) as f:
        points = [e for e in map(json.loads, f) if "loss_d" in e]
    logged = [e["step"] for e in points]
    stepped = range(paused["step"] + 1, paused["step"] + 13)
    # Every stepped update is on the chart, marked as stepped (a marker off the line, left out of the
    # phase rules); the points the run logged by itself are not. The last was D's alone.
    assert [e["step"] for e in points if e.get("stepped")] == list(stepped)
    assert [e.get("updated") for e in points if e.get("stepped")] == [None] * 11 + ["d"]
    assert after["message"].endswith(f"stepped 1 update of D alone from step {paused['step'] + 11}.")
    assert logged == sorted(set(logged))
    changes = [(e["step"], e["settings"]) for e in run.read_events()[0] if "settings" in e]
    assert changes == [(paused["step"], {"lr_d": 1e-3, "n_critic": 2})]
    assert (run.read_config().lr_d, run.read_config().n_critic) == (1e-3, 2)

    # Still paused: nothing trains until Resume, which carries on from the stepped step.
    assert status()["step"] == paused["step"] + 12
    # Resume then Pause, milliseconds apart (the REST road): the later press wins and is answered
    # with what happens, never "already paused" while a Resume is pending.
    assert app.call("resume", 0, "")[0] in ("Resuming...",)
    answer = app.call("pause", "")[0]
    assert answer in ("Staying paused: the Resume pressed just before is cancelled.", "Pausing..."), answer
    wait_for(lambda: status()["state"] == "paused" and run.read_request() != "resume", 60,
             what="the run paused, no Resume pending")
    # And Pause then Resume: the Resume wins, the run trains on.
    client.predict(api_name="/resume")
    wait_for(lambda: status()["state"] == "running", 60, what="the resumed run")
    answers = [app.call("pause", "")[0], app.call("resume", 0, "")[0]]
    assert answers[0] == "Pausing..." and answers[1] in ("Training on: the Pause pressed just before is cancelled.",
                                                         "Resuming..."), answers
    wait_for(lambda: status()["state"] == "running" and status()["step"] > paused["step"] + 12, 60,
             what="the resumed run")
    client.predict(api_name="/stop")
    wait_for(lambda: status()["state"] == "stopped", 60, what="the stop")


# Stop-then-Pause tries, each a new run: the race is run a hundred times without an app in
# tests/unit/test_requests.py; here, that the app and the trainer keep to its rules.
TRIES = 3
# A Stop heard takes a second or two here; a Pause that replaced it would leave the run paused until
# the watchdog ends it "by force" (BLINK_STOP_ESCALATE), which this would see.
END_SECONDS = 30


def test_a_pause_pressed_just_after_stop_never_replaces_it(app):
    client = app.client()
    status = app.status

    def ended(timeout):
        """The run's status once it has ended, else (after `timeout` s) the last one seen."""
        deadline = time.time() + timeout
        while (s := status())["state"] not in FINAL_STATES and time.time() < deadline:
            time.sleep(0.1)
        return s

    outcomes = []
    for _ in range(TRIES):   # one app, a new run each time
        press_start(client, **FORM, log_every=5, checkpoint_every=5)
        # Past the trainer's warm-up steps: the watchdog then times its step (core/heartbeat.py).
        running = wait_for(lambda: (s := status())["state"] == "running" and s["step"] >= 5 and s, 120,
                           interval=0.1, what="the run")
        run = RunDir(os.path.join(app.runs_root, running["run"]))
        stop = client.submit(api_name="/stop")
        # Pause the moment the Stop is written (watched in the run directory, not waiting for the
        # Stop's answer to come back), so it lands before the trainer has heard the Stop.
        wait_for(lambda: run.read_request() == "stop" or stop.done(), 10, interval=0.002, what="the Stop")
        stopped_at = time.perf_counter()
        # Through Gradio's REST road: it lands within milliseconds, where a gradio_client call
        # takes tenths of a second on a loaded machine, by when the trainer has heard the Stop.
        answer = app.call("pause", "")[0]
        late = time.perf_counter() - stopped_at   # the Pause's round trip: it landed within this
        assert "Stopping" in stop.result()
        final = ended(END_SECONDS)
        outcomes.append((round(late, 3), answer, final["state"], final["message"], final["step"],
                         final["saved_step"]))
        if final["state"] not in FINAL_STATES:   # the Pause won (the bug): end this run for the next try
            client.predict(api_name="/stop")
            wait_for(lambda: ended(0)["state"] in FINAL_STATES, 60, what="the run to stop")
    said = "\n".join(f"Pause answered {o[0]:.2f} s after the Stop: {o[1]!r}; the run: {o[2]}, {o[3]!r}, "
                      f"step {o[4]}, saved {o[5]}" for o in outcomes)
    for late, answer, state, message, step, saved_step in outcomes:
        assert state == "stopped" and message == f"Stopped by request at step {step}.", said
        assert saved_step == step > 0, said
        # The Pause was answered in words: a Stop is pending (or the run had already ended).
        assert answer in ("Stopping already: Pause comes too late.", "No run is training."), said
    # The race was run: Pauses landed while the Stop was pending.
    assert any(answer.startswith("Stopping already") for _, answer, *_ in outcomes), said


def rank_pids(app) -> list[int]:
    """The app's trainer ranks: the processes the trainer forked into its own process group (the
    trainer leads the group it runs in, so a rank's parent is its group's leader; the app leads its own)."""
    ranks = []
    for pid in children_of(app.process.pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid, pgrp = f.read().rpartition(")")[2].split()[1:3]
        except OSError:
            continue
        if ppid == pgrp != str(app.process.pid):
            ranks.append(pid)
    return ranks


def test_a_run_over_two_processes_from_the_page_pauses_resumes_and_stop_ends_every_rank(app):
    """Processes 2 on the CPU: the app starts two ranks (DDP over gloo) as torchrun would, in its
    trainer's process group. The status says how each batch is split; Pause and Resume reach both;
    with one rank wedged (SIGSTOP), Stop still ends the run, every rank with it, the checkpoint kept."""
    client = app.client()
    press_start(client, **FORM, log_every=2, checkpoint_every=4, processes=2)
    running = wait_for(lambda: (s := app.status())["state"] == "running" and s["saved_step"] >= 4 and s, 180,
                       interval=0.2, what="the two-process run's first checkpoint")
    assert running["layout"] == "2 processes (DDP, gloo), batch 16 = 8 per process", running["layout"]
    ranks = wait_for(lambda: len(pids := rank_pids(app)) == 2 and pids, 30, what="the two ranks")
    assert client.predict(api_name="/pause") == "Pausing..."
    paused = wait_for(lambda: (s := app.status())["state"] == "paused" and s, 60, what="the pause")
    beat = paused_beat(os.path.join(app.runs_root, paused["run"]))
    assert beat["step"] == paused["step"]   # both ranks wait: none trains on alone
    assert app.status()["step"] == paused["step"]
    client.predict(0, api_name="/resume")
    wait_for(lambda: (s := app.status())["state"] == "running" and s["step"] > paused["step"], 60, what="the resume")
    os.kill(ranks[1], signal.SIGSTOP)   # wedged: rank 0 waits for it in the next collective
    try:
        client.predict(api_name="/stop")
        ended = wait_for(lambda: (s := app.status())["state"] in FINAL_STATES and s, 120, what="the stop")
        assert ended["state"] == "stopped" and "Stopped by force" in ended["message"], ended
        assert f"The last checkpoint (step {ended['saved_step']}) is kept" in ended["message"]
        assert RunDir(os.path.join(app.runs_root, ended["run"])).has_checkpoint()
        wait_for(lambda: not any(alive(pid) for pid in ranks) and not rank_pids(app), 30, what="every rank to end")
    finally:
        for pid in rank_pids(app):
            os.kill(pid, signal.SIGKILL)
    # Resumed from the page, both ranks go on from the checkpoint to the end asked for (each rank's own
    # resume check knows the trainer that forked it).
    target = ended["step"] + 4   # past every step the stopped run reached: this end is the resumed run's
    assert "Resuming" in client.predict(target, api_name="/resume")
    done = wait_for(lambda: (s := app.status())["state"] in FINAL_STATES and (s["step"] == target or s["state"] == "failed")
                    and s, 180, interval=0.2, what="the resumed two-process run to end")
    assert (done["state"], done["step"]) == ("done", target), done
    assert done["layout"].startswith("2 processes (DDP, gloo)"), done["layout"]


# A long CPU run that logs (and checkpoints) every other step, so a checkpoint exists before the wedge.
WEDGE_FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=8, precision="fp32",
                  device="cpu", steps=100000)
WEDGE_OPTIONS = {"log_every": 1, "checkpoint_every": 2}


def _running(app, min_step: int = 0):
    status = app.status()
    assert status["state"] != "failed", status   # said at once, not after the wait
    return status if status["state"] == "running" and status["saved_step"] >= min_step else None


def live_message(app) -> dict:
    """What the live panel of a page opened now gets first (/live/events): its words included."""
    with urllib.request.urlopen(app.url + "live/events", timeout=30) as stream:
        for line in stream:
            if line.startswith(b"data: "):
                return json.loads(line[len(b"data: "):])
    raise AssertionError("the live stream ended without a message")


def test_stop_ends_a_wedged_trainer_by_force_and_start_works_again(app):
    try:
        client = app.client()
        press_start(client, **WEDGE_FORM, **WEDGE_OPTIONS)
        status = wait_for(lambda: _running(app, min_step=2), timeout=300, what="a checkpoint")
        trainer = status["pid"]
        # A real wedge, from outside: a stopped process reads no request and answers nothing.
        os.kill(trainer, signal.SIGSTOP)
        # Before anyone presses Stop, every viewer is told: past the watchdog's bound (3 s here),
        # /live/status says since when it is silent and the live panel says so in words.
        silent = wait_for(lambda: (s := app.status())["silent_since"] and s, timeout=30, what="the silence")
        assert silent["state"] == "running" and time.time() - silent["silent_since"] > 3, silent
        words = live_message(app)["status_html"]
        assert "<b>Not answering for " in words and "no sign of life since " in words, words
        assert f"The host can press Stop: the app ends a trainer that does not answer and keeps the last " \
               f"checkpoint (step {silent['saved_step']})." in words, words
        assert "Stopping" in client.predict(api_name="/stop")

        stopped = wait_for(lambda: (s := app.status())["state"] in ("stopped", "failed") and s,
                           timeout=30, what="the forced stop")
        assert stopped["state"] == "stopped", stopped
        assert stopped["message"].startswith("Stopped by force: the trainer did not answer Stop (it has not answered for ")
        assert f"The last checkpoint (step {stopped['saved_step']}) is kept" in stopped["message"]
        assert stopped["saved_step"] >= 2
        assert not alive(trainer)   # SIGKILL reaches a stopped process

        # Start works again without restarting the app: a new trainer, which stops normally.
        press_start(client, **WEDGE_FORM, **WEDGE_OPTIONS)
        second = wait_for(lambda: _running(app, min_step=2), timeout=300, what="the second run's checkpoint")
        assert second["pid"] != trainer and second["run"] != stopped["run"]

        # A trainer that has written its end but hangs on exit does not block Resume: the app
        # waits as long as for a Stop, then ends it. (Its end is written here, while it is held.)
        hung = second["pid"]
        os.kill(hung, signal.SIGSTOP)
        RunDir(os.path.join(app.runs_root, second["run"])).write_status("stopped", "Stopped by request.")
        assert "Resuming" in client.predict(resume_steps=0, api_name="/resume")
        assert not alive(hung)
        second = wait_for(lambda: _running(app), timeout=300, what="the resumed run")
        assert second["pid"] != hung
        assert "Stopping" in client.predict(api_name="/stop")
        ended = wait_for(lambda: (s := app.status())["state"] in ("stopped", "failed") and s,
                         timeout=120, what="the second run to stop")
        assert ended["state"] == "stopped" and "by force" not in ended["message"], ended
        left = children_of(app.process.pid)
    finally:
        app.stop()
    # The trainers and the fork server are reaped a moment after the app exits.
    wait_for(lambda: not [pid for pid in left + [trainer] if alive(pid)], 30, what="every process of the app to exit")


# ---- disk use is bounded and owned (issue 13, item 3) ----------------------------------------------
def _zip_of_noise(path, seed: int, count: int = 8) -> str:
    """A zip of `count` 16x16 noise PNGs: distinct content, near-equal sizes (noise does not compress)."""
    import zipfile
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(count):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(buffer, "PNG")
            zf.writestr(f"{i}.png", buffer.getvalue())
    return str(path)


def test_uploads_and_sample_outputs_are_bounded_and_removed_when_the_app_exits(tmp_path):
    """One app with a small uploads cap and a temp folder of its own: uploaded datasets are evicted
    least recently used, never a kept run's zip, and only for the host (anyone else's upload must
    fit); the Sample tab's files are bounded, the one uploaded generator in use is kept, and all
    of them go when the app exits, as do two runs training at once (each stopped with its
    checkpoint). The folders an app killed with SIGKILL left go when the next app starts; a live
    app's stay."""
    from gradio_client import handle_file
    from app.sample_tab import KEEP_OUTPUTS, MAX_OUTPUTS
    from app.serving import OWNER_FILE
    zips = [_zip_of_noise(tmp_path / f"set{i}.zip", seed=i) for i in range(6)]
    cap_mb = 2.5 * max(os.path.getsize(z) for z in zips) / 2**20    # room for two and a half of them
    runs, data_dir, temp = tmp_path / "runs", tmp_path / "data", tmp_path / "tmp"
    runs.mkdir()
    temp.mkdir()
    ended = subprocess.Popen(["true"])
    ended.wait()
    others = {}                    # another app's folders: one that died (a pid no longer running), one alive (this test)
    for owner, pid in (("dead", ended.pid), ("live", os.getpid())):
        for kind in ("uploads", "sample"):
            folder = others[owner, kind] = temp / f"blink-{kind}-{owner}"
            (folder / "abc").mkdir(parents=True)
            (folder / "abc" / "left.zip").write_bytes(b"x" * 1000)
            (folder / OWNER_FILE).write_text(str(pid))
    key = "host"
    app = RunningApp(str(runs), env={"BLINK_DATA_DIR": str(data_dir), "BLINK_UPLOADS_MB": str(cap_mb),
                                     "TMPDIR": str(temp), "BLINK_HOST_KEY": key}).wait_ready()

    def own(kind: str):
        (folder,) = [f for f in temp.glob(f"blink-{kind}-*") if (f / OWNER_FILE).read_text() == str(app.process.pid)]
        return folder
    try:
        assert not others["dead", "uploads"].exists() and not others["dead", "sample"].exists()
        assert (others["live", "uploads"] / "abc" / "left.zip").exists() and (others["live", "sample"] / "abc").exists()
        client = app.client()
        _, first, _ = client.predict(handle_file(zips[0]), key, api_name="/upload_dataset")
        client.predict(dataset="folder", data_path=first, gan="dcgan", preset="fast", batch_size=8, precision="fp32",
                       device="cpu", steps=5, key=key, api_name="/start")
        wait_for(lambda: app.status().get("state") == "done", timeout=300, what="the run on it")
        kept = [client.predict(handle_file(z), key, api_name="/upload_dataset")[1] for z in zips[1:5]]
        # An upload is named to the page by its name, never by where the server keeps it.
        assert all(re.fullmatch(r"upload:[0-9a-f]+\.zip", name) for name in [first, *kept]), [first, *kept]
        # Without the key an upload may not make room: the folder is full, so it is refused.
        *_, note = client.predict(handle_file(zips[5]), "", api_name="/upload_dataset")
        assert "uploads folder is full" in note and "ask the host" in note, note
        # Gradio's uploads went to a folder of the app's own (not the machine's <temp>/gradio), and
        # each left it once checked.
        own_uploads = own("uploads")
        assert not (temp / "gradio").exists()
        assert not [f for f in own_uploads.rglob("*.zip")], list(own_uploads.rglob("*"))

        for i in range(KEEP_OUTPUTS // 2 + 2):   # more files than are always kept, of two kinds
            client.predict(i, i + 1, 4, "linear", api_name="/interpolation_gif")
            client.predict(i, 4, api_name="/download_samples")
        shipped = os.path.join(ROOT, "assets", "generator")
        other = tmp_path / "other"     # the shipped generator with another step: a second distinct upload
        other.mkdir()
        with open(os.path.join(shipped, "generator.json")) as f:
            meta = json.load(f)
        (other / "generator.json").write_text(json.dumps({**meta, "step": meta.get("step", 0) + 1}))
        for meta_path in (os.path.join(shipped, "generator.json"), str(other / "generator.json")):
            client.predict([handle_file(os.path.join(shipped, "generator.safetensors")), handle_file(meta_path)],
                           key, api_name="/upload_generator")
        root = own("sample")
        outputs = [p for p in root.iterdir() if p.is_dir() and p.name != "uploaded"]
        # All made within the serving time, so all still there for a slow viewer; the count and
        # age limits themselves: tests/unit/test_sample_handlers.py.
        assert KEEP_OUTPUTS < len(outputs) == 2 * (KEEP_OUTPUTS // 2 + 2) <= MAX_OUTPUTS, outputs
        assert len(list((root / "uploaded").iterdir())) == 1     # the one in use

        # Two runs at once as the app exits: both stop with a checkpoint, and no trainer is left.
        client.predict(dataset="folder", data_path=first, gan="dcgan", preset="fast", batch_size=8, precision="fp32",
                       device="cpu", steps=100_000, key=key, api_name="/start")
        wait_for(lambda: app.status().get("step", 0) > 0, timeout=120, what="a long run")
        answer = client.predict("lr_d", "at once", key, api_name="/start_comparison")
        names = [app.status()["run"]]
        if len(os.sched_getaffinity(0)) >= 2:   # one core trains one run: the comparison would wait instead
            assert "at once beside run" in answer, answer
            names.append(app.status()["compare"])
        pair = [RunDir(str(runs / name)) for name in names]
        wait_for(lambda: all(run.read_status().step > 0 for run in pair), timeout=120, what="both runs training")
        trainers = [run.read_status().pid for run in pair]
    finally:
        app.stop()
    for run in pair:   # each asked to stop by the app (not left to notice the app gone: "has closed")
        status = run.read_status()
        assert status.state == "stopped" and status.message.startswith("Stopped by request") \
            and run.has_checkpoint(), status
    assert not [pid for pid in trainers if alive(pid)]
    stored = sorted(os.listdir(data_dir / "uploads"))
    # The oldest upload stays (the kept run trained on it), the newest stays, the ones between go.
    assert stored == sorted(p.removeprefix("upload:") for p in (first, kept[-1])), stored
    assert sorted(temp.glob("blink-*")) == sorted([others["live", "sample"], others["live", "uploads"]])


def test_a_test_process_killed_half_way_leaves_no_app_behind(tmp_path):
    """The suite's own promise: a pytest killed with SIGKILL (a CI timeout) takes its apps and
    their trainers with it, because every RunningApp ends with the process that started it."""
    import signal
    holder = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "fault_scripts", "hold_app.py"),
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        app_pid = int(holder.stdout.readline())
        assert alive(app_pid)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        wait_for(lambda: not alive(app_pid), 60, what="the app to end with the process that started it")
    finally:
        if holder.poll() is None:
            holder.kill()
