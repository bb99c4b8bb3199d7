"""The studio end to end: the real app process, driven through its named API like a script would."""
import json
import math
import os
import time

import pytest
from gradio_client.exceptions import AppError
from PIL import Image

from tests.apphelpers import RunningApp, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    running = RunningApp(str(tmp_path_factory.mktemp("runs"))).wait_ready()
    yield running
    assert running.stop() is not None


def test_bad_settings_are_refused_before_any_process_starts(app):
    client = app.client()
    with pytest.raises(AppError, match="minimum value 1|batch_size must be"):
        client.predict("bundled-mnist", "", "dcgan", "auto", 0, "fp32", "auto", 50, api_name="/start")
    with pytest.raises(AppError, match="4096"):
        client.predict("bundled-mnist", "", "dcgan", "auto", 20000, "fp32", "auto", 50, api_name="/start")
    with pytest.raises(AppError, match="fp16"):   # refused on every CPU (bf16 depends on the CPU: AMX has it)
        client.predict("bundled-mnist", "", "dcgan", "auto", 64, "fp16", "cpu", 50, api_name="/start")
    assert client.predict(api_name="/status")["run"] == ""   # no run directory was created


def test_a_short_run_streams_events_and_grids_then_samples(app):
    client = app.client()
    message = client.predict("bundled-mnist", "", "dcgan", "auto", 32, "fp32", "auto", 120, api_name="/start")
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
    run_path = os.path.dirname(os.path.dirname(status["grid"]))
    with open(os.path.join(run_path, "events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    losses = [e for e in events if "loss_d" in e]
    assert [e["step"] for e in losses] == [1, 25, 50, 75, 100, 120]
    assert all(math.isfinite(e["loss_d"]) and math.isfinite(e["loss_g"]) for e in losses)
    # The quality curve got its point at the end of the run (the shipped MNIST classifier).
    quality = [e for e in events if "quality_fd" in e]
    assert [e["step"] for e in quality] == [120] and math.isfinite(quality[0]["quality_fd"])
    # Grids were written and updated (steps 1, 100, 120), never overwritten.
    grid_files = sorted(os.listdir(os.path.join(os.path.dirname(status["grid"]))))
    assert grid_files == ["step_000001.png", "step_000100.png", "step_000120.png"]
    assert len(seen_grids) >= 2
    with Image.open(status["grid"]) as grid:   # class-conditional on MNIST's labels: a column per digit
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


def test_stop_ends_the_run_and_keeps_what_was_trained(app):
    client = app.client()
    client.predict("bundled-mnist", "", "dcgan", "auto", 32, "fp32", "auto", 100000, api_name="/start")
    wait_for(lambda: client.predict(api_name="/status")["step"] or None if
             client.predict(api_name="/status")["state"] == "running" else None, timeout=300, what="training")
    time.sleep(1)
    assert "Stopping" in client.predict(api_name="/stop")
    status = wait_for(lambda: (s := client.predict(api_name="/status"))["state"] == "stopped" and s, timeout=120,
                      what="the run to stop")
    assert status["saved_step"] == status["step"] > 0
    run_path = os.path.dirname(os.path.dirname(status["grid"]))
    assert os.path.exists(os.path.join(run_path, "checkpoint.pt"))
    assert os.path.exists(os.path.join(run_path, "generator.safetensors"))
