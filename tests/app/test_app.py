"""The studio end to end: the real app process, driven through its named API like a script would."""
import io
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from tests.apphelpers import ROOT, RunningApp, alive, children_of, torch_loaded, wait_for

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
                try:
                    client.predict(**{**defaults, p["parameter_name"]: bad}, api_name=name)
                    continue   # a field that takes any value (a picker of runs by name) and a handler that ignored it
                except AppError as refused:
                    message = str(refused)
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
        status = client.predict(api_name="/status")
        seen_events.append(status["events"])
        if status.get("grid"):
            seen_grids.add(status["grid"])
        return status if status["state"] in ("done", "failed", "stopped") else None

    status = wait_for(finished, timeout=400, interval=0.5, what="the run to end")
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
    second = wait_for(lambda: (s := client.predict(api_name="/status"))["run"] != first and s, 30, what="the comparison")
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
    third = wait_for(lambda: (s := client.predict(api_name="/status"))["run"] not in (first, second["run"]) and s,
                     400, interval=0.5, what="the queued comparison, once the first finished")
    assert third["compare"] == second["run"] and config(second["run"])["batch_size"] == 32
    assert config(third["run"])["batch_size"] == 256
    client.predict(api_name="/stop")
    wait_for(lambda: client.predict(api_name="/status")["state"] in ("stopped", "done"), 120, what="the stop")


def test_stop_ends_the_run_and_keeps_what_was_trained(app):
    client = app.client()
    client.predict("bundled-mnist", "", "dcgan", "auto", 32, "fp32", "auto", 100000, api_name="/start")
    wait_for(lambda: (s := app.status())["state"] == "running" and s["step"], timeout=300, what="training")
    time.sleep(1)
    assert "Stopping" in client.predict(api_name="/stop")
    status = wait_for(lambda: (s := app.status())["state"] == "stopped" and s, timeout=120,
                      what="the run to stop")
    assert status["saved_step"] == status["step"] > 0
    run_path = os.path.join(app.runs_root, status["run"])
    assert os.path.exists(os.path.join(run_path, "checkpoint.pt"))
    assert os.path.exists(os.path.join(run_path, "generator.safetensors"))


# ---- disk use is bounded and owned (issue 13, item 3) ----------------------------------------------
def _zip_of_noise(path, seed: int, count: int = 8) -> str:
    """A zip of `count` 16x16 noise PNGs: distinct content, near-equal sizes (noise does not compress)."""
    import io
    import zipfile
    import numpy as np
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
