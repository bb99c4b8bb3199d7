"""The host's controls on one real app (`python app.py`), each test a real run of its own, in turn:
- Step: a paused run advances exactly the generator updates asked for, with the grid and D's
  verdicts before and after, and stays paused (the lesson's "watch one update change the fakes"),
  with settings changed while paused (Change while training) from the first stepped update;
- Stop, then Pause a moment later (issue 45): the Stop is kept, so every run ends "stopped" by
  request with its last step saved, never paused and then killed by the Stop watchdog (the rules
  themselves, raced a hundred times: tests/unit/test_requests.py);
- Stop always ends a run: a trainer that cannot answer Stop is shown to every viewer as not
  answering before anyone presses Stop, is ended by the app, Start works again, and the app's
  processes all exit with it (last: it stops the app)."""
import json
import os
import signal
import time

import pytest
from gradio_client.exceptions import AppError

from core.rundir import FINAL_STATES, RunDir
from tests.apphelpers import alive, children_of, press_start, wait_for

pytestmark = pytest.mark.slow

# The Stop watchdog ends a trainer silent (or stuck in one step) this long after a Stop: short, for
# the wedge below; a healthy trainer answers within a second or two and is never ended by it.
APP_ENV = {"OMP_NUM_THREADS": "1", "BLINK_STOP_ESCALATE": "3"}
FORM = ("bundled-mnist", "", "dcgan", "fast", 16, "fp32", "cpu", 100000)


def test_step_and_ten_steps_while_paused_train_exactly_that_and_show_before_and_after(app):
    client = app.client()

    status = app.status

    assert client.predict(api_name="/step") == "No run is training."
    press_start(client, *FORM, log_every=5)
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
    client.predict(api_name="/resume")
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
        press_start(client, *FORM, log_every=5, checkpoint_every=5)
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
    """The app's trainer ranks: its descendants running core.train (the trainer process starts them)."""
    ranks = []
    for pid in children_of(app.process.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"\0-m\0core.train\0" in f.read():   # not the fork server, which preloads it
                    ranks.append(pid)
        except OSError:
            pass
    return ranks


def test_a_run_over_two_processes_from_the_page_pauses_resumes_and_stop_ends_every_rank(app):
    """Processes 2 on the CPU: the app starts two ranks (DDP over gloo) as torchrun would, in its
    trainer's process group. The status says how each batch is split; Pause and Resume reach both;
    with one rank wedged (SIGSTOP), Stop still ends the run, every rank with it, the checkpoint kept."""
    client = app.client()
    press_start(client, *FORM, log_every=2, checkpoint_every=4, processes=2)
    running = wait_for(lambda: (s := app.status())["state"] == "running" and s["saved_step"] >= 4 and s, 180,
                       interval=0.2, what="the two-process run's first checkpoint")
    assert running["layout"] == "2 processes (DDP, gloo), batch 16 = 8 per process", running["layout"]
    ranks = wait_for(lambda: len(pids := rank_pids(app)) == 2 and pids, 30, what="the two ranks")
    assert client.predict(api_name="/pause") == "Pausing..."
    paused = wait_for(lambda: (s := app.status())["state"] == "paused" and s, 60, what="the pause")
    time.sleep(1)
    assert app.status()["step"] == paused["step"]   # both ranks wait: none trains on alone
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


# A long CPU run that logs (and checkpoints) every other step, so a checkpoint exists before the wedge.
WEDGE_FORM = ("bundled-mnist", "", "dcgan", "fast", 8, "fp32", "cpu", 100000)
WEDGE_OPTIONS = {"log_every": 1, "checkpoint_every": 2}


def _running(app, min_step: int = 0):
    status = app.status()
    assert status["state"] != "failed", status   # said at once, not after the wait
    return status if status["state"] == "running" and status["saved_step"] >= min_step else None


def live_message(app) -> dict:
    """What the live panel of a page opened now gets first (/live/events): its words included."""
    import urllib.request
    with urllib.request.urlopen(app.url + "live/events", timeout=30) as stream:
        for line in stream:
            if line.startswith(b"data: "):
                return json.loads(line[len(b"data: "):])
    raise AssertionError("the live stream ended without a message")


def test_stop_ends_a_wedged_trainer_by_force_and_start_works_again(app):
    try:
        client = app.client()
        press_start(client, *WEDGE_FORM, **WEDGE_OPTIONS)
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
        press_start(client, *WEDGE_FORM, **WEDGE_OPTIONS)
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
