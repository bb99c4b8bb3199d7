"""The ZeroGPU road under ZeroGPU's own rules: the real `spaces` package in its ZeroGPU mode and
Gradio's ZeroGPU queue, against a stand-in of ZeroGPU's device API (device_api.py), with the app
started as a Space starts it (space.py: `python app.py`, the worker's CUDA step set aside)."""
from __future__ import annotations

import base64
import glob
import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.apphelpers import ROOT, RunningApp, wait_for
from tests.zerogpu.device_api import DeviceApi

pytestmark = pytest.mark.slow

CHUNK_SECONDS = 2.0
STEPS = 150
IMAGES = 2400   # enough that preparing them outlasts a chunk on two cores


def token(name: str) -> str:
    """A proxy token shaped as ZeroGPU's (a JWT: `spaces` reads its payload)."""
    part = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part({'user': name})}.sig"


def make_images(folder) -> str:
    """Two classes of 64x64 images, one a colour each with noise: decoded and resized on Start."""
    rng = np.random.default_rng(0)
    for c, colour in enumerate(((220, 40, 40), (40, 40, 220))):
        os.makedirs(folder / f"class{c}")
        for i in range(IMAGES // 2):
            pixels = np.clip(np.array(colour) + rng.normal(0, 30, (64, 64, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"class{c}" / f"{i}.png")
    return str(folder)


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """The app as a ZeroGPU Space runs it, and the device API it talks to."""
    # ZeroGPU kills a call that outlasts its duration; a chunk asks for 1.5 times the margin its
    # earlier calls measured. Here three test workers share two cores, so a call can run three
    # times slower than the one that measured it, which no ZeroGPU node's own GPU call sees: the
    # kill comes at three times the duration (the kill itself is the "abort" answer's road).
    tmp = tmp_path_factory.mktemp("zerogpu")
    runs = tmp / "runs"
    runs.mkdir()
    api = DeviceApi(duration_factor=3.0, progress=lambda: logged_step(str(runs))).start()
    env = {"SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": api.url,
           "BLINK_CHUNK_SECONDS": str(CHUNK_SECONDS), "BLINK_DATA_DIR": str(tmp / "cache"),
           "BLINK_DATA_ROOTS": str(tmp), "OMP_NUM_THREADS": "1"}
    app = RunningApp(str(runs), env=env, script=os.path.join(ROOT, "tests", "zerogpu", "space.py")).wait_ready()
    try:
        yield app, api, tmp
    finally:
        app.stop()
        api.stop()


def logged_step(runs: str) -> int:
    """The newest step any run under `runs` has logged: where the stand-in's "abort" waits for a call to train."""
    newest = 0
    for path in glob.glob(os.path.join(runs, "*", "events.jsonl")):
        with open(path) as f:
            lines = f.read().splitlines()
        for line in reversed(lines):
            try:
                newest = max(newest, json.loads(line)["step"])
                break
            except (ValueError, KeyError):   # a line being written
                continue
    return newest


def client(app, name: str):
    from gradio_client import Client
    return Client(app.url, verbose=False, headers={"X-IP-Token": token(name)})


def test_a_room_pressing_sample_together_is_answered(space):
    """Gradio holds one waiting event on a ZeroGPU Space unless told otherwise: 50 presses of
    Sample at once must all come back with their samples (Sample runs on the Space's CPU)."""
    app, _, _ = space
    # A request each through Gradio's REST API, all at once, as a room's phones send them.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(50) as room:
        answers = list(room.map(lambda seed: app.call("sample", seed, 16, "seed"), range(50)))
    assert len(answers) == 50
    assert all(image["url"].endswith(".png") and caption.startswith("Generator:") for image, caption in answers), \
        answers[0]


def test_chunks_on_zero_gpu_prepare_first_wait_abort_refuse_and_charge_the_presser(space):
    app, api, tmp = space
    folder = make_images(tmp / "pets")
    seen = []
    host = client(app, "host")

    def status():
        seen.append(app.status())
        return seen[-1]

    api.plan(["queue:8", "abort"])
    form = dict(dataset="folder", data_path=folder, gan="dcgan", preset="fast", batch_size=16, precision="fp32",
                device="auto", steps=STEPS)
    # Every step logged: the stand-in aborts chunk 2 at its first step, however fast this machine trains.
    assert "Started" in host.predict(**form, log_every=1, grid_every=1000, checkpoint_every=1000, seed=0,
                                     api_name="/start")

    # The data is decoded and resized on the CPU, with its progress, before any GPU is asked for.
    waiting = wait_for(lambda: (s := status())["state"] == "waiting" and s, timeout=180, interval=0.1,
                       what="chunk 1 to wait in ZeroGPU's queue")
    preparing = [s for s in seen if s["state"] == "preparing"]
    assert preparing and preparing[-1]["message"] == f"Preparing the dataset: {IMAGES:,} of {IMAGES:,} images..."
    assert preparing[-1]["updated"] < api.log()[0]["asked"]
    assert "Waiting for a GPU for chunk 1" in waiting["message"]

    # Chunk 2 is aborted mid-call, once it has trained (the API kills the worker): paused, the lost
    # steps named, the events trimmed to the checkpoint the next chunk goes on from.
    paused = wait_for(lambda: (s := status())["state"] == "paused" and s, timeout=180, interval=0.1,
                      what="the aborted chunk")
    assert "chunk 2 was aborted while training" in paused["message"], paused["message"]
    assert f"since the checkpoint at step {paused['saved_step']}" in paused["message"]
    assert paused["step"] == paused["saved_step"] > 0
    run_dir = os.path.join(app.runs_root, paused["run"])
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        assert max(e["step"] for e in map(json.loads, f)) <= paused["saved_step"]
    calls = api.log()
    assert [c["answer"] for c in calls] == ["queue:8", "abort"]
    assert calls[0]["pid"] == calls[1]["pid"] and api.allows == 1   # one worker, kept
    assert all(c["token"] == token("host") for c in calls)
    assert calls[1]["duration"] < calls[0]["duration"]   # the second asks for what the first measured

    # Resume by a student helper whose quota is spent: ZeroGPU's words, nothing lost.
    helper = client(app, "helper")
    api.plan(["quota"])
    assert "Resuming" in helper.predict(api_name="/resume")
    refused = wait_for(lambda: (s := status())["state"] == "paused" and "quota" in s["message"] and s,
                       timeout=60, interval=0.1, what="the quota refusal")
    assert "no GPU was given for chunk 3 (You have exceeded your free ZeroGPU quota" in refused["message"]
    assert refused["saved_step"] == paused["saved_step"]
    assert api.log()[-1]["token"] == token("helper")

    # An expired token pauses too; Resume by someone else goes on with their own token.
    api.expire(token("helper"))
    assert "Resuming" in helper.predict(api_name="/resume")
    expired = wait_for(lambda: "Expired ZeroGPU proxy token" in (s := status())["message"] and s, timeout=60,
                       what="the expired token")
    assert "press Resume on the Space's huggingface.co page" in expired["message"], expired["message"]
    api.plan(["hold", "queue:200", "queue:200"])
    assert "Resuming" in host.predict(api_name="/resume")
    # While chunk 3 trains, the host's open page hands the run its fresh identity (its timer's
    # request): the next call carries it, not the press's, which expires within minutes.
    assert api.held.wait(120), "chunk 3 never trained"
    client(app, "host, a minute later").predict("", api_name="/refresh_identity")
    api.release()
    wait_for(lambda: status()["chunk_ended"] >= 3, timeout=120, interval=0.1, what="chunk 3")
    granted = [c for c in api.log() if c["answer"] == "hold"][-1]
    assert granted["token"] == token("host") and granted["allowed"]

    # Pause while chunk 4 waits in ZeroGPU's queue leaves it as Stop does: no GPU held while paused.
    wait_for(lambda: status()["state"] == "waiting", timeout=120, interval=0.1, what="a wait in the queue")
    assert "Pausing" in host.predict(api_name="/pause")
    left = wait_for(lambda: (s := status())["state"] == "paused" and s, timeout=30, interval=0.1, what="the pause")
    assert "while chunk 4 waited for a GPU: it left ZeroGPU's queue, so no GPU time was spent" in left["message"]
    assert api.log()[-1]["answer"] == "queue:200" and api.log()[-1]["allowed"] is None
    assert api.log()[-1]["token"] == token("host, a minute later")
    assert "Resuming" in host.predict(api_name="/resume")   # queues for chunk 4 again

    # Stop while chunk 4 waits in ZeroGPU's queue leaves it: no GPU taken, nothing spent.
    wait_for(lambda: status()["state"] == "waiting", timeout=120, interval=0.1, what="a wait in the queue")
    host.predict(api_name="/stop")
    stopped = wait_for(lambda: (s := status())["state"] == "stopped" and s, timeout=30, interval=0.1,
                       what="the stop")
    assert stopped["message"].endswith("while waiting for a GPU: no GPU time was spent.")
    assert api.log()[-1]["answer"] == "queue:200" and api.log()[-1]["allowed"] is None

    # Resumed, it trains to the end in chunks: every logged step once, in order.
    api.plan([])
    assert "Resuming" in host.predict(0, api_name="/resume")
    done = wait_for(lambda: (s := status())["state"] == "done" and s, timeout=300, what="the end of the run")
    assert done["step"] == STEPS
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        logged = [e["step"] for e in map(json.loads, f) if "loss_d" in e]
    assert logged == sorted(set(logged)) and logged[-1] == STEPS
    assert all(c["fail"] is False for c in api.log() if c["answer"] == "grant" and c["released"])


def test_an_anonymous_press_is_told_whose_quota_it_would_spend_before_anything_runs(space):
    """From the direct address Gradio's client sends no ZeroGPU identity, and a token that fell back
    to IP-based quotas names none either: Start is refused in words, no GPU call is asked for and
    no run is made."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError
    app, api, _ = space
    runs_before, calls_before = sorted(os.listdir(app.runs_root)), len(api.log())
    part = lambda value: base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")
    fell_back = f"{part({'alg': 'none'})}.{part({'error': 'no user'})}.sig"
    for headers in ({}, {"X-IP-Token": fell_back}):
        with pytest.raises(AppError, match="This press is anonymous, so ZeroGPU would charge this network's shared "
                                           "quota .* press it on the Space's huggingface.co page while signed in"):
            Client(app.url, verbose=False, headers=headers).predict(
                dataset="bundled-mnist", steps=50, api_name="/start")
    assert len(api.log()) == calls_before and sorted(os.listdir(app.runs_root)) == runs_before
