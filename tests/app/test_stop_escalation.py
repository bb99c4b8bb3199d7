"""Stop always ends a run: a trainer that cannot answer Stop is ended by the app, and Start works again."""
import os
import signal

import pytest

from tests.apphelpers import RunningApp, alive, children_of, press_start, wait_for

pytestmark = pytest.mark.slow

# A long CPU run that logs (and checkpoints) every other step, so a checkpoint exists before the wedge.
FORM = ("bundled-mnist", "", "dcgan", "fast", 8, "fp32", "cpu", 100000)
OPTIONS = {"log_every": 1, "checkpoint_every": 2}


def _running(client, min_step: int = 0):
    status = client.predict(api_name="/status")
    assert status["state"] != "failed", status   # said at once, not after the wait
    return status if status["state"] == "running" and status["saved_step"] >= min_step else None


def test_stop_ends_a_wedged_trainer_by_force_and_start_works_again(tmp_path):
    app = RunningApp(str(tmp_path), env={"BLINK_STOP_ESCALATE": "3"}).wait_ready()
    try:
        client = app.client()
        press_start(client, *FORM, **OPTIONS)
        status = wait_for(lambda: _running(client, min_step=2), timeout=300, what="a checkpoint")
        trainer = status["pid"]
        # A real wedge, from outside: a stopped process reads no request and answers nothing.
        os.kill(trainer, signal.SIGSTOP)
        assert "Stopping" in client.predict(api_name="/stop")

        stopped = wait_for(lambda: (s := client.predict(api_name="/status"))["state"] in ("stopped", "failed") and s,
                           timeout=30, what="the forced stop")
        assert stopped["state"] == "stopped", stopped
        assert stopped["message"].startswith("Stopped by force: the trainer did not answer Stop (it has not answered for ")
        assert f"The last checkpoint (step {stopped['saved_step']}) is kept" in stopped["message"]
        assert stopped["saved_step"] >= 2
        assert not alive(trainer)   # SIGKILL reaches a stopped process

        # Start works again without restarting the app: a new trainer, which stops normally.
        press_start(client, *FORM, **OPTIONS)
        second = wait_for(lambda: _running(client, min_step=2), timeout=300, what="the second run's checkpoint")
        assert second["pid"] != trainer and second["run"] != stopped["run"]

        # A trainer that has written its end but hangs on exit does not block Resume: the app
        # waits as long as for a Stop, then ends it. (Its end is written here, while it is held.)
        from core.rundir import RunDir
        hung = second["pid"]
        os.kill(hung, signal.SIGSTOP)
        RunDir(os.path.join(str(tmp_path), second["run"])).write_status("stopped", "Stopped by request.")
        assert "Resuming" in client.predict(resume_steps=0, api_name="/resume")
        assert not alive(hung)
        second = wait_for(lambda: _running(client), timeout=300, what="the resumed run")
        assert second["pid"] != hung
        assert "Stopping" in client.predict(api_name="/stop")
        ended = wait_for(lambda: (s := client.predict(api_name="/status"))["state"] in ("stopped", "failed") and s,
                         timeout=120, what="the second run to stop")
        assert ended["state"] == "stopped" and "by force" not in ended["message"], ended
        left = children_of(app.process.pid)
    finally:
        app.stop()
    # The trainers and the standby are reaped a moment after the app exits.
    wait_for(lambda: not [pid for pid in left + [trainer] if alive(pid)], 30, what="every process of the app to exit")
