"""The live view's watcher (app/live.py) on a real run directory, without a server."""
import json

from app.job import Job
from app.live import MAX_POINTS, LiveFeed, downsample, plot_points, status_html
from core.config import TrainConfig
from core.rundir import RunDir
from core.status import Status
from tests.filehelpers import cpu_plan


def message(data: bytes) -> dict:
    assert data.startswith(b"data: ") and data.endswith(b"\n\n")
    return json.loads(data[6:])


def test_each_change_is_rendered_once_and_deltas_carry_only_new_points(runs_root):
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=1, steps=100, gan="dcgan")
    run.append_event({"step": 1, "loss_d": 1.0, "loss_g": 2.0, "d_real": 0.5, "d_fake": 0.4})
    feed = LiveFeed(Job(runs_root))
    assert feed.refresh() and feed.renders == 1
    for _ in range(5):                  # nothing changed: however often it looks, nothing is rendered
        assert not feed.refresh()
    assert feed.renders == 1
    run.append_event({"step": 25, "loss_d": 0.9, "loss_g": 1.5, "d_real": 0.6, "d_fake": 0.3})
    run.write_status("running", "Training...", step=25, steps=100, gan="dcgan")
    run.save_grid([[[[0.0]]]], 25, columns=1)
    assert feed.refresh() and feed.renders == 2
    delta, full = message(feed.current.delta), message(feed.current.full)
    assert delta["points"]["loss_d"] == [[25, 0.9]] and not delta["reset"]
    assert full["points"]["loss_d"] == [[1, 1.0], [25, 0.9]] and full["reset"]
    assert full["grid"] == f"live/grid/{run.name}/25" and full["state"] == "running"


def test_a_page_shows_what_the_run_holds_after_its_events_are_trimmed(runs_root):
    """An aborted chunk's steps (or a killed session's, before a resume) are dropped from events.jsonl
    (RunDir.trim_events); a page that had them starts over from the trimmed file, even once the run
    has logged more events than it had before."""
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=30, steps=100, gan="dcgan")
    for step in range(1, 31):
        run.append_event({"step": step, "loss_d": 1.0, "loss_g": 2.0})
    feed = LiveFeed(Job(runs_root))
    assert feed.refresh()
    run.trim_events(20)                                    # the checkpoint was at step 20
    for step in range(21, 36):                             # the next chunk: 35 events, more than the 30 shown
        run.append_event({"step": step, "loss_d": 0.5, "loss_g": 1.5})
    run.write_status("running", "Training...", step=35, steps=100, gan="dcgan")
    assert feed.refresh()
    delta = message(feed.current.delta)
    assert delta["reset"] and [p[0] for p in delta["points"]["loss_d"]] == list(range(1, 36))
    assert [p[1] for p in delta["points"]["loss_d"] if p[0] > 20] == [0.5] * 15   # none of the dropped points


def test_history_is_bounded_and_keeps_the_newest_point():
    points = [[i, float(i)] for i in range(10_000)]
    kept = downsample(points)
    assert len(kept) == MAX_POINTS and kept[-1] == [9999, 9999.0] and kept[0] == [0, 0.0]
    assert downsample(points[:10]) == points[:10]


def test_non_finite_values_are_left_out_and_text_is_escaped():
    series = plot_points([{"step": 1, "loss_d": float("nan"), "loss_g": 1.0}], "dcgan")
    assert series == {"loss_g": [[1, 1.0]]}
    text = status_html(Status(state="failed", message="<script>alert(1)</script>"), "run", [])
    assert "<script>" not in text and "&lt;script&gt;" in text and "<b>failed</b>" in text


def _routes_of(feed):
    from starlette.applications import Starlette
    from starlette.testclient import TestClient
    return TestClient(Starlette(routes=feed.routes()))


def test_numbers_in_live_urls_that_int_refuses_are_a_400_or_a_404_not_a_server_error(runs_root):
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=1, steps=100, gan="dcgan")
    run.save_grid([[[[0.0]]]], 1, columns=1)
    client = _routes_of(LiveFeed(Job(runs_root)))
    for since in ("\u00b2", "1" * 5000, "-1", "1.5"):   # '²'.isdigit() is True; int() refuses it and 5,000 digits
        answer = client.get("/live/status", params={"since": since})
        assert answer.status_code == 400 and "whole number" in answer.text, (since, answer.status_code)
    assert client.get("/live/status").json()["state"] == "running"
    for step in ("\u00b2", "1" * 5000):
        assert client.get(f"/live/grid/{run.name}/{step}").status_code == 404
    assert client.get(f"/live/grid/{run.name}/1").status_code == 200


def test_a_since_wait_ends_at_its_limit_while_the_run_keeps_changing(runs_root, monkeypatch):
    import threading
    import time
    from app import live
    monkeypatch.setattr(live, "STATUS_WAIT_SECONDS", 1.0)
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=1, steps=10_000, gan="dcgan")
    client, writing = _routes_of(LiveFeed(Job(runs_root), watch_seconds=0.05)), threading.Event()

    def keep_changing():
        step = 1
        while not writing.is_set():
            step += 1
            run.write_status("running", "Training...", step=step, steps=10_000, gan="dcgan")
            time.sleep(0.1)
    writer = threading.Thread(target=keep_changing)
    writer.start()
    try:
        asked = time.monotonic()
        answer = client.get("/live/status", params={"since": str(10**11)})   # a version the run never reaches
        waited = time.monotonic() - asked
    finally:
        writing.set()
        writer.join()
    assert answer.status_code == 200 and answer.json()["step"] > 1
    assert waited >= 0.9, waited    # each change woke it, and it still ended at its limit


def test_the_grid_route_serves_no_link_placed_in_the_grids_folder(runs_root, tmp_path):
    import os
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=2, steps=100, gan="dcgan")
    run.save_grid([[[[0.0]]]], 1, columns=1)
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not for viewers")
    os.symlink(secret, os.path.join(run.path, "grids", "step_000002.png"))
    client = _routes_of(LiveFeed(Job(runs_root)))
    assert client.get(f"/live/grid/{run.name}/1").status_code == 200
    assert client.get(f"/live/grid/{run.name}/2").status_code == 404


def test_a_trainer_that_falls_silent_is_shown_to_every_viewer_once_and_again_once_heard(runs_root):
    import os
    import re
    import time
    from app.supervisor import STOP_ESCALATE_SECONDS
    run = RunDir.create(cpu_plan(), runs_root)
    # A live trainer (this process) whose last status and last beat are older than the Stop watchdog's bound.
    run.write_status("running", "Training...", step=12, steps=100, saved_step=10, gan="dcgan", pid=os.getpid())
    last = time.time() - STOP_ESCALATE_SECONDS - 10
    with open(run.file("status.json")) as f:
        written = json.load(f)
    with open(run.file("status.json"), "w") as f:
        json.dump({**written, "updated": last - 5}, f)

    def beat(at, pid=os.getpid()):   # heartbeat.json as core/heartbeat.py's Heartbeat writes it
        run.write_heartbeat({"time": at, "pid": pid, "doing": "training", "since": at - 60, "step": 12,
                             "step_time": at, "step_seconds": 0.5, "compiled_at": 0.0})
    beat(last)
    feed = LiveFeed(Job(runs_root))
    assert feed.refresh()
    shown = message(feed.current.full)
    assert shown["silent_since"] == last and feed.current.status["silent_since"] == last   # the page and /live/status
    seconds = int(re.search(r"<b>Not answering for (\d+) s</b>", shown["status_html"]).group(1))
    assert STOP_ESCALATE_SECONDS + 10 <= seconds <= STOP_ESCALATE_SECONDS + 15   # counted at render time
    assert time.strftime("%H:%M:%S", time.localtime(last)) in shown["status_html"]
    assert "The host can press Stop: the app ends a trainer that does not answer and keeps the last checkpoint " \
           "(step 10)." in shown["status_html"]
    assert not feed.refresh() and feed.renders == 1   # silent on: nothing more to render (the page counts)

    beat(time.time())   # heard again: one more change, and the words go
    assert feed.refresh() and feed.renders == 2
    shown = message(feed.current.delta)
    assert shown["silent_since"] is None and "Not answering" not in shown["status_html"]
    # An earlier trainer's old beat (a resumed run) says nothing of this one, which is starting.
    beat(last, pid=os.getpid() + 1)
    assert not feed.refresh() and feed.current.status["silent_since"] is None


def test_a_stepped_update_is_a_marked_point():
    events = [{"step": 5, "loss_d": 1.0, "loss_g": 2.0}, {"step": 6, "loss_d": 1.5, "loss_g": 1.0, "stepped": True}]
    assert plot_points(events, "dcgan")["loss_d"] == [[5, 1.0], [6, 1.5, 1]]


def test_a_settings_change_is_a_mark_every_page_gets_and_not_a_point(runs_root):
    run = RunDir.create(cpu_plan(), runs_root)
    run.write_status("running", "Training...", step=25, steps=100, gan="dcgan")
    run.append_event({"step": 20, "loss_d": 1.0, "loss_g": 2.0, "d_real": 0.5, "d_fake": 0.4})
    feed = LiveFeed(Job(runs_root))
    assert feed.refresh() and message(feed.current.full)["marks"] == []
    run.append_event({"step": 20, "time": 1.0, "settings": {"lr_d": 1e-3, "n_critic": 2}})
    run.append_event({"step": 25, "loss_d": 0.9, "loss_g": 1.5, "d_real": 0.6, "d_fake": 0.3})
    assert feed.refresh()
    delta, full = message(feed.current.delta), message(feed.current.full)
    assert delta["marks"] == full["marks"] == [[20, "D's learning rate 0.001, D updates per G update 2"]]
    assert full["points"]["loss_d"] == [[20, 1.0], [25, 0.9]]   # no point of its own


def test_before_a_run_the_page_says_nothing_of_a_gan_type_it_has_not_chosen(runs_root):
    """No run yet: the primer's sections and the healthy ranges are no type's (the default is the
    relativistic pairing on a CPU, not the DCGAN they once showed); a run's are its own type's."""
    from app.views import healthy_lines
    feed = LiveFeed(Job(runs_root))
    feed.refresh()
    first = message(feed.current.full)
    assert first["gan"] == "" and set(first["healthy"]) == {"quality"}, first["healthy"]
    run = RunDir.create(cpu_plan(gan="rpgan"), runs_root)
    run.write_status("running", "Training...", step=1, steps=100, gan="rpgan")
    feed = LiveFeed(Job(runs_root))
    feed.refresh()
    shown = message(feed.current.full)
    assert shown["gan"] == "rpgan" and shown["healthy"] == healthy_lines("rpgan")
