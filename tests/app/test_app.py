"""The studio end to end: the real app process, driven through its named API like a script would:
the Train tab's runs, the Sample tab as a student uses it, and the disk an app may use."""
import io
import json
import math
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from core import quality
from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import ROOT, Refused, RunningApp, alive, children_of, press_start, torch_loaded, wait_for

pytestmark = pytest.mark.slow


def test_bad_settings_are_refused_before_any_process_starts(app):
    client = app.client()
    # The project's own checks answer, naming the field (the number boxes have no limits of their own;
    # each rule of the form is checked on the Train tab itself in tests/unit/test_train_tab.py).
    with pytest.raises(AppError, match=r"Batch size must be between 1 and 4,096 \(got 0\)"):
        client.predict("bundled-mnist", "", "dcgan", "auto", 0, "fp32", "auto", 50, api_name="/start")
    with pytest.raises(AppError, match="fp16"):   # refused on every CPU (bf16 depends on the CPU: AMX has it)
        client.predict("bundled-mnist", "", "dcgan", "auto", 64, "fp16", "cpu", 50, api_name="/start")
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
    message = client.predict("bundled-mnist", "", "dcgan", "auto", 32, "fp32", "auto", 120, seed=7, api_name="/start")
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
    assert status["phase"] == Phase("dcgan", True, events).line() and status["phase"].split(":")[0] in (
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
    # at once (nothing trains), shown beside it; a second one, pressed while that trains, waits for it
    # to finish and is shown beside it in turn.
    first = status["run"]
    assert "beside run" in client.predict("lr_d", api_name="/start_comparison")
    second = wait_for(lambda: (s := app.status())["run"] != first and s, 30, what="the comparison")
    assert second["compare"] == first

    def config(run):
        with open(os.path.join(app.runs_root, run, "config.json")) as f:
            values = json.load(f)
        return values.get("config", values)
    assert "Queued" in client.predict("batch_size", api_name="/start_comparison")
    assert second["run"] in client.predict(api_name="/status")["compare_note"]
    wait_for(lambda: os.path.exists(os.path.join(app.runs_root, second["run"], "config.json"))
             and "format" in open(os.path.join(app.runs_root, second["run"], "config.json")).read(), 60,
             what="the comparison's plan")
    planned = config(second["run"])
    assert (planned["lr_d"], planned["seed"], planned["steps"]) == (pytest.approx(10 * config(first)["lr_d"]), 7, 120)
    third = wait_for(lambda: (s := app.status())["run"] not in (first, second["run"]) and s,
                     400, interval=0.5, what="the queued comparison, once the first finished")
    assert third["compare"] == second["run"] and config(second["run"])["batch_size"] == 32
    assert config(third["run"])["batch_size"] == 256
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
    of them go when the app exits. The folders an app killed with SIGKILL left go when the next
    app starts; a live app's stay."""
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
        client.predict("folder", first, "dcgan", "fast", 8, "fp32", "cpu", 5, key=key, api_name="/start")
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
    finally:
        app.stop()
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
