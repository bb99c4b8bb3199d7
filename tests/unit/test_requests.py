"""The order of requests to a trainer (issue 45): a Stop is never replaced by what is pressed after
it, a Step under way finishes first, and otherwise the later press wins (core/rundir.py RunDir.request).
Through the real app: tests/app/test_app.py."""
import os
import threading

import pytest

from app import views
from app.job import Job
from core.config import TrainConfig
from core.control import Control
from core.rundir import RunDir
from core.status import Status
from tests.filehelpers import cpu_plan

# (pending, pressed) -> (what request() returns: the pending request kept, or "" when asked;
#                        the request pending afterwards)
ORDER = {
    ("", "stop"): ("", "stop"), ("", "pause"): ("", "pause"), ("", "resume"): ("", "resume"),
    ("", "step"): ("", "step"),
    ("stop", "stop"): ("", "stop"), ("stop", "pause"): ("stop", "stop"), ("stop", "resume"): ("stop", "stop"),
    ("stop", "step"): ("stop", "stop"),
    ("pause", "stop"): ("", "stop"), ("pause", "pause"): ("", "pause"), ("pause", "resume"): ("", "resume"),
    ("pause", "step"): ("", "step"),
    ("resume", "stop"): ("", "stop"), ("resume", "pause"): ("", "pause"), ("resume", "resume"): ("", "resume"),
    ("resume", "step"): ("", "step"),
    ("step", "stop"): ("", "stop"), ("step", "pause"): ("", "pause"), ("step", "resume"): ("step", "step"),
    ("step", "step"): ("step", "step"),
}
# Step is asked only of a paused run with its Pause pending (Job.request): the file alone takes it.


@pytest.mark.parametrize("pending,pressed", sorted(ORDER))
def test_each_press_over_each_pending_request_has_one_outcome(tmp_path, pending, pressed):
    run = RunDir(str(tmp_path))
    if pending:
        run.request(pending, 3)
    assert run.request(pressed, 7) == ORDER[pending, pressed][0]
    assert run.read_request() == ORDER[pending, pressed][1]
    assert Control(run).decision() == {"resume": "run", "": "run"}.get(run.read_request(), run.read_request())


def test_a_step_kept_keeps_its_count_and_the_trainers_own_pause_after_it_never_replaces_a_stop(tmp_path):
    run = RunDir(str(tmp_path))
    run.request("pause")
    run.request("step", 3)
    assert run.request("step", 10) == "step" and run.read_step_count() == 3   # the first Step's count
    run.request("stop")                           # pressed while the trainer steps
    assert run.request("pause") == "stop"         # what the trainer writes once stepped (core/train.py)
    assert run.read_request() == "stop" and Control(run).wait_while_paused() == "stop"


def test_a_resume_heard_is_cleared_but_a_stop_or_pause_pressed_meanwhile_stays(tmp_path):
    run = RunDir(str(tmp_path))
    run.request("pause")
    run.request("resume")
    assert Control(run).wait_while_paused() == "run" and run.read_request() == ""
    # Heard as "run", then Stop pressed before the trainer cleared the Resume: the Stop is kept.
    run.request("resume")
    run.request("stop")
    run.clear_request("resume")
    assert run.read_request() == "stop"
    run.clear_request()                           # the run acted on it, or ended: nothing is left
    assert run.read_request() == "" and os.listdir(run.path) == []
    run.request("resume")
    run.request("pause")                          # Resume, then Pause again before the Resume was heard
    run.clear_request("resume")
    assert run.read_request() == "pause"



def test_between_chunks_a_chunked_run_decides_as_the_loop_does_without_waiting(tmp_path):
    """The chunk chain (app/chain.py) asks Control between two chunks: no request goes on, unless
    the app paused the run (a GPU refused); a Resume is heard once and cleared; a Stop is kept over
    a later press; the app closing is "gone". The words are the Loop's."""
    from core.control import paused_message, stopped_message
    run = RunDir(str(tmp_path))
    closing = False
    control = Control(run, app_closing=lambda: closing)
    assert control.between_chunks(paused=False) == "run"
    assert control.between_chunks(paused=True) == "pause"     # paused by the app: until Resume
    run.request("pause")
    assert control.between_chunks(paused=False) == "pause"    # a Pause the last chunk had no time to hear
    run.request("resume")
    assert control.between_chunks(paused=True) == "resume" and run.read_request() == ""
    run.request("stop")
    run.request("resume")
    assert control.between_chunks(paused=True) == "stop" and run.read_request() == "stop"
    closing = True
    assert control.between_chunks(paused=False) == control.decision() == "gone"
    assert (stopped_message("stop", 12), paused_message(12)) == ("Stopped by request at step 12.", "Paused at step 12.")
    assert stopped_message("gone", 12).startswith("Stopped: the app that started this run has closed.")

@pytest.mark.parametrize("later", ["pause", "resume"])
def test_a_stop_stays_when_a_later_press_races_it_from_another_thread(tmp_path, later):
    run = RunDir(str(tmp_path))
    lost = []
    for round_ in range(100):
        run.clear_request()
        if later == "resume":
            run.request("pause")                  # Resume is pressed on a paused run
        together = threading.Barrier(2)

        def press(action):
            together.wait()
            run.request(action)
        threads = [threading.Thread(target=press, args=(action,)) for action in ("stop", later)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if run.read_request() != "stop":
            lost.append(round_)
    assert lost == [], f"the Stop was replaced in {len(lost)} of 100 rounds"


def test_the_app_answers_a_press_after_a_stop_in_words_and_the_page_keeps_saying_stopping(tmp_path):
    runs = str(tmp_path / "runs")
    run = RunDir.create(cpu_plan(), runs)
    run.write_status("running", "Training...", pid=os.getpid())   # a live trainer, as Job sees one
    job = Job(runs)                                                # adopts the newest run
    assert job.request("stop").startswith("Stopping...")
    for press in ("pause", "resume", "step"):
        assert job.request(press, 1) == f"Stopping already: {press.capitalize()} comes too late."
    assert run.read_request() == "stop"
    status = job.snapshot().status
    assert status.request == "stop" and views.status_line(status).startswith("**stopping...**")
    run.write_status("paused", "Paused at step 5.")     # a Stop heard while paused: still stopping
    assert views.status_line(job.snapshot().status).startswith("**stopping...**")
    run.write_status("stopped", "Stopped by request at step 5.")
    assert job.request("pause") == "No run is training."   # ended: its trainer only has to exit
    assert views.status_line(job.snapshot().status).startswith("**stopped**")


def test_the_app_keeps_a_step_under_way_and_says_so(tmp_path):
    runs = str(tmp_path / "runs")
    run = RunDir.create(cpu_plan(), runs)
    run.write_status("paused", "Paused at step 5.", pid=os.getpid())
    job = Job(runs)
    assert "Pause first" in job.request("step", 1)       # paused, but its Pause not pending: resuming
    run.request("pause")
    assert job.request("step", 10).startswith("Stepping 10")
    for press in ("resume", "step"):
        assert job.request(press, 1) == "Still stepping: the grid after the last Step comes first."
    assert run.read_step_count() == 10
    assert views.status_line(Status(state="paused", request="pause")).startswith("**paused**")
    assert views.status_line(Status(state="running", request="pause")).startswith("**pausing...**")


def test_a_pause_pressed_while_the_trainer_takes_a_resume_pauses_it_again(tmp_path):
    """The trainer clears a Resume it heard before it writes that it trains: in that window the run
    still reads "paused" with nothing pending, and a Pause must be written, not answered "already"."""
    runs = str(tmp_path / "runs")
    run = RunDir.create(cpu_plan(), runs)
    run.write_status("paused", "Paused at step 5.", pid=os.getpid())
    run.request("pause")
    job = Job(runs)
    assert job.request("pause") == "The run is already paused: press Resume to continue."
    assert job.request("resume") == "Resuming..."
    assert job.request("pause") == "Staying paused: the Resume pressed just before is cancelled."
    run.request("resume")
    Control(run).wait_while_paused()                      # the trainer hears the Resume: cleared
    assert run.read_request() == "" and run.read_status().state == "paused"
    assert job.request("pause") == "Pausing..." and run.read_request() == "pause"
