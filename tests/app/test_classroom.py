"""Classroom behaviour with real processes: one run per server, many viewers, host key,
stop/resume, crashes, divergence, and no process left behind.

The app runs as `python app.py` (tests/apphelpers.RunningApp) with a private runs folder;
runs are tiny (batch 16, log every 5) and are stopped by request rather than run to the end,
so each test costs a few trainer steps on a loaded 2-core machine.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

import pytest
from gradio_client.exceptions import AppError

from tests.apphelpers import ROOT, RunningApp, alive, children_of, wait_for
from tests.clihelpers import run_cli

# Long enough never to finish during a test: every run here ends by Stop, a kill or a NaN.
FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=16, precision="fp32",
            device="cpu", steps=5000, log_every=5, grid_every=10, checkpoint_every=20)
STEP_TIMEOUT = 240      # seconds for a few steps on a machine shared with other engineers


# ---- helpers ---------------------------------------------------------------------------------
def process_group(pgid: int) -> list[int]:
    """Live (non-zombie) pids in a process group: RunningApp starts the app as a session leader,
    so the app, its trainer and multiprocessing's helper processes all share its group."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(name))
    return pids


def assert_nothing_left(app: RunningApp, seen_pids: set[int], timeout: float = 30) -> None:
    wait_for(lambda: not process_group(app.process.pid) and not [p for p in seen_pids if alive(p)], timeout,
             what="every process of the app to exit")


def runs(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if os.path.exists(os.path.join(root, n, "config.json")))


def status(client) -> dict:
    """The named API's /status: what a script in the room reads."""
    return client.predict(api_name="/status")


def start(client, key, **overrides):
    return client.predict(**{**FORM, **overrides, "key": key}, api_name="/start")


def wait_state(client, states, timeout=STEP_TIMEOUT, min_step=0) -> dict:
    def check():
        s = status(client)
        return s if s.get("state") in states and (s.get("step") or 0) >= min_step else None
    return wait_for(check, timeout, interval=1.0, what=f"state in {states} at step >= {min_step}")


def events(run_path: str) -> list[dict]:
    with open(os.path.join(run_path, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def start_app(root: str, *args, env=None) -> RunningApp:
    return RunningApp(root, extra_args=args, env={"OMP_NUM_THREADS": "1", **(env or {})}).wait_ready()


# ---- one run at a time, many viewers, host key, stop -> checkpoint, resume, kill -9 ------------
@pytest.mark.slow
def test_classroom_one_run_many_viewers_stop_resume_crashes_and_a_restarted_ui(runs_root):
    """--host 0.0.0.0 without --host-key: the app makes a key and prints it (as Jupyter prints its
    token); every server-wide action needs it, a student's tap changes nothing. Then one run for
    a room: two Starts at once, 9 viewers of three kinds, Stop, Resume, kill -9 of the trainer, a new
    run; kill -9 of the UI, whose trainer stops by itself; a restarted UI that shows and resumes
    that run, and stops it on SIGTERM."""
    import re
    from gradio_client import Client, handle_file
    app = start_app(runs_root, "--host", "0.0.0.0")
    seen = set()
    try:
        key = wait_for(lambda: re.search(r"Host key: (\S+)", app.read_log()), 30, what="the printed host key").group(1)
        host = app.client()
        # Watch mode: without the key nothing starts, no run directory appears, no generator is swapped.
        with pytest.raises(AppError, match="Only the host can start, stop, pause or resume runs"):
            start(host, key="")
        with pytest.raises(AppError, match="Only the host can start, stop, pause or resume runs"):
            start(host, key="wrong")
        shipped = os.path.join(ROOT, "assets", "generator")
        upload = [handle_file(os.path.join(shipped, n)) for n in ("generator.safetensors", "generator.json")]
        with pytest.raises(AppError, match="Only the host can start, stop, pause or resume runs"):
            host.predict(upload, "", api_name="/upload_generator")
        with pytest.raises(AppError, match="Only the host can start, stop, pause or resume runs"):
            host.predict("wrong", api_name="/use_run_generator")
        assert runs(runs_root) == []
        assert "Using the uploaded generator" in host.predict(upload, key, api_name="/upload_generator")

        # Two Start presses at the same moment: the job's lock lets exactly one spawn.
        results, barrier = [], threading.Barrier(2)

        def press():
            client = app.client()
            barrier.wait()
            try:
                results.append(("ok", start(client, key)))
            except Exception as exc:   # gradio_client re-raises the server's gr.Error
                results.append(("refused", str(exc)))
        threads = [threading.Thread(target=press) for _ in range(2)]
        [t.start() for t in threads]
        [t.join(120) for t in threads]
        assert sorted(r[0] for r in results) == ["ok", "refused"], results
        assert "already training" in [r[1] for r in results if r[0] == "refused"][0]
        assert len(runs(runs_root)) == 1
        first = wait_state(host, ("running",), min_step=1)
        seen.update(children_of(app.process.pid))
        run_path = os.path.join(runs_root, first["run"])

        # 9 scripted viewers while someone tries to start a second run: a third ask gradio's /status
        # once a second, a third wait on /live/status?since=V (an answer only when the run changed),
        # a third read the page's own stream, /live/events (one message per change).
        errors, polls, stop_polling = [], [], threading.Event()

        per_viewer = [0] * 9

        def viewer(i):
            try:
                version = 0
                if i % 3 == 2:
                    with urllib.request.urlopen(f"{app.url}live/events", timeout=60) as stream:
                        for line in stream:
                            if stop_polling.is_set():
                                return
                            if line.startswith(b"data: "):
                                message = json.loads(line[6:])
                                assert message["version"] > version, (message, version)   # each one a change
                                version = message["version"]
                                per_viewer[i] += 1
                    return
                client = Client(app.url, verbose=False)
                while not stop_polling.is_set():
                    if i % 3:
                        s = client.predict(api_name="/status")
                        time.sleep(1.0)
                    else:
                        with urllib.request.urlopen(f"{app.url}live/status?since={version}", timeout=60) as answer:
                            s = json.load(answer)
                        version = s["version"]
                    polls.append(s)
                    per_viewer[i] += 1
            except Exception as exc:
                errors.append(repr(exc))
        viewers = [threading.Thread(target=viewer, args=(i,), daemon=True) for i in range(9)]
        [v.start() for v in viewers]
        wait_for(lambda: min(per_viewer) >= 1 or errors, 120, what="every viewer's first answer")
        with pytest.raises(AppError, match=r"A run is already training \("):
            start(app.client(), key)
        wait_for(lambda: min(per_viewer) >= 3 or errors, 120, what="three answers per viewer")
        stop_polling.set()
        [v.join(60) for v in viewers]
        assert not errors, errors[:3]
        assert len(runs(runs_root)) == 1, "a refused start must not create a run directory"
        status_polls = [p for p in polls if isinstance(p, dict)]
        assert status_polls and all(p["run"] == first["run"] for p in status_polls)

        # Stop: the trainer saves a checkpoint and a grid at the step it stopped.
        assert "Stopping" in host.predict(key=key, api_name="/stop")
        stopped = wait_state(host, ("stopped",))
        stop_step = stopped["step"]
        assert stopped["saved_step"] == stop_step and stop_step >= 5
        assert os.path.exists(os.path.join(run_path, "checkpoint.pt"))
        assert os.path.exists(os.path.join(run_path, "generator.safetensors"))
        assert os.listdir(os.path.join(run_path, "grids"))
        before = events(run_path)

        # Resume (same run, a longer total): the step count and loss curve continue.
        with pytest.raises(AppError, match="Only the host can start, stop, pause or resume runs"):
            host.predict(resume_steps=stop_step + 5000, key="", api_name="/resume")
        assert "Resuming" in host.predict(resume_steps=stop_step + 5000, key=key, api_name="/resume")
        resumed = wait_state(host, ("running",), min_step=stop_step + 5)
        assert resumed["run"] == first["run"] and len(runs(runs_root)) == 1
        # Its plan is its first session's: why 'auto' became its preset is still said.
        assert resumed["preset_reason"] == stopped["preset_reason"] and stopped["preset_reason"].startswith("auto: ")
        after = events(run_path)
        new_steps = [e["step"] for e in after[len(before):] if "loss_d" in e]
        assert new_steps and min(new_steps) > stop_step, (stop_step, new_steps)   # no reset to step 1
        assert after[:len(before)] == before                                      # history kept
        seen.update(children_of(app.process.pid))

        # kill -9 of the trainer: the run says failed, with the reason and a hint; a new run can start.
        trainer_pid = resumed["pid"]
        os.kill(trainer_pid, signal.SIGKILL)
        failed = wait_state(host, ("failed",), timeout=60)
        assert "killed (SIGKILL) from outside" in failed["message"] and "is kept" in failed["message"]
        from core.failures import oom_kills
        if oom_kills() is not None:   # the kernel counts its out-of-memory kills: this one was not for memory
            assert "not for memory" in failed["message"] and "batch" not in failed["message"], failed["message"]
        assert not alive(trainer_pid)
        assert "Started run" in start(host, key)
        second = wait_state(host, ("running",), min_step=1)
        assert second["run"] != first["run"] and len(runs(runs_root)) == 2
        seen.update(children_of(app.process.pid))

        # The UI process vanishes (kill -9: no atexit, no shutdown): its trainer stops by itself.
        os.kill(app.process.pid, signal.SIGKILL)
        app.process.wait()
        wait_for(lambda: not alive(second["pid"]), STEP_TIMEOUT, what="the orphaned trainer to exit by itself")
        second_path = os.path.join(runs_root, second["run"])
        orphaned = json.load(open(os.path.join(second_path, "status.json")))
        assert orphaned["state"] == "stopped" and "closed" in orphaned["message"], orphaned
    finally:
        seen.update(children_of(app.process.pid))
        app.stop()
    assert_nothing_left(app, seen)

    # A restarted UI shows that run where it stopped and resumes it; SIGTERM (docker stop, a Space
    # restart) then stops the app, and the app its trainer, with a checkpoint.
    again = start_app(runs_root)
    seen = set()
    try:
        client = again.client()
        shown = status(client)
        assert shown["run"] == second["run"] and shown["state"] == "stopped"
        step = shown["step"]
        client.predict(resume_steps=step + 5000, key="", api_name="/resume")
        wait_state(client, ("running",), min_step=step + 1)
        seen.update(children_of(again.process.pid))
    finally:
        again.stop(signal.SIGTERM, timeout=180)
    assert again.process.returncode is not None
    assert_nothing_left(again, seen)
    final = json.load(open(os.path.join(second_path, "status.json")))
    assert final["state"] == "stopped" and final["saved_step"] > step, final


# ---- divergence via the real code path, then the CLI resume (and its config check) -----------
@pytest.mark.slow
def test_forced_nan_fails_with_explanation_and_cli_resumes(runs_root):
    run_path = os.path.join(runs_root, "nan-run")
    # The CLI trainer with step 13's batch poisoned (tests/fault_scripts/nan_train.py).
    cli = [os.path.join("tests", "fault_scripts", "nan_train.py"), "--dataset", "bundled-mnist",
           "--device", "cpu", "--preset", "fast", "--batch-size", "16", "--log-every", "5", "--grid-every", "10",
           "--checkpoint-every", "10", "--steps", "40"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BLINK_FAULT_NAN_AT_STEP": "13"}
    done = run_cli(cli + ["--run-dir", run_path], env=env, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    s = json.load(open(os.path.join(run_path, "status.json")))
    assert s["state"] == "failed" and s["step"] == 15, s            # caught at the first log step after 13
    assert "diverged at step 15" in s["message"] and "NaN" in s["message"]
    assert "last good checkpoint (step 10)" in s["message"] and s["saved_step"] == 10
    import torch
    checkpoint = torch.load(os.path.join(run_path, "checkpoint.pt"), map_location="cpu", weights_only=False)
    assert checkpoint["step"] == 10
    assert all(torch.isfinite(t).all() for t in checkpoint["G"].values() if t.is_floating_point())

    # A changed config is refused with the reason; nothing is trained.
    refused = run_cli(["-m", "core.train", "--resume", run_path, "--lr-g", "0.0005"], env=env, timeout=120)
    assert refused.returncode == 2 and "config changed in lr_g" in refused.stderr

    # The real CLI resumes the last good checkpoint and continues its step count.
    resumed = run_cli(["-m", "core.train", "--resume", run_path, "--steps", "20"], env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    s = json.load(open(os.path.join(run_path, "status.json")))
    assert s["state"] == "done" and s["step"] == 20 and s["saved_step"] == 20
    assert torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=False)["step"] == 20


# ---- fast checks of the pieces (no trainer) ----------------------------------------------------
def test_query_parameters_preset_the_form_and_bad_ones_are_noted():
    from app.train_form import setup_from_query, share_query
    values, notes = setup_from_query({"dataset": "cifar10", "batch_size": "32", "steps": "1e9", "gan": "evil",
                                      "precision": "bf16", "device": "cpu", "preset": "fast", "__theme": "dark"})
    assert values == {"dataset": "cifar10", "batch_size": 32, "precision": "bf16", "device": "cpu", "preset": "fast"}
    assert len(notes) == 2 and any("steps" in n for n in notes) and any("gan=evil" in n for n in notes)
    query = share_query("cifar10", "hinge", "fast", 32.0, "bf16", 500, "cpu")
    assert setup_from_query(dict(p.split("=") for p in query.split("&")))[0]["gan"] == "hinge"


def test_retention_keeps_newest_and_never_the_current_run(tmp_path):
    from app.job import Job
    from core.rundir import RunDir
    from tests.filehelpers import cpu_plan
    root = str(tmp_path)
    made = []
    for i in range(5):
        run = RunDir.create(cpu_plan(), path=os.path.join(root, f"2026010{i}-000000-dcgan-bundled-mnist"))
        run.write_status("done", "")
        made.append(run.name)
    job = Job(root, keep_runs=2, max_runs_mb=0)
    job._attach(RunDir(os.path.join(root, made[0])))    # the oldest is the one on screen: kept
    deleted = job.prune()
    assert sorted(deleted) == made[1:3]
    assert sorted(os.listdir(root)) == sorted([made[0], made[3], made[4]])
