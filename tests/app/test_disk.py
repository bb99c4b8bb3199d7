"""A full or read-only disk under the runs folder: a run ends `failed` with what to free or change,
no temp file is left, and viewers keep their page. Real small disks (tmpfs mounts), the real CLI
and the real app process."""
import json
import os
import re
import subprocess

import pytest
from gradio_client.exceptions import AppError

from tests.apphelpers import RunningApp, wait_for
from tests.clihelpers import run_cli
from tests.filehelpers import leftovers

pytestmark = pytest.mark.slow

TINY_RUN = ["--steps", "30", "--batch-size", "16", "--log-every", "5", "--checkpoint-every", "10",
            "--grid-every", "10", "--quality-every", "0", "--device", "cpu"]


@pytest.fixture
def read_only_folder(tmp_path, mount):
    """A runs folder nobody may write: mode 0555, or (root ignores modes) a read-only mount."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir()
        path.chmod(0o555)
        yield str(path)
        path.chmod(0o755)
    else:
        yield mount("read-only", "ro,size=1m")


def cli(*args, env=None):
    return run_cli(["-m", "core.train", *args], env={**os.environ, **(env or {})}, timeout=300)


def test_cli_run_on_a_full_disk_fails_saying_how_much_to_free_and_that_is_enough(mount):
    disk = mount("disk", "size=1m")   # smaller than the first checkpoint of this tiny run
    done = cli("--run-dir", os.path.join(disk, "run"), *TINY_RUN, env={"BLINK_RUNS_DIR": disk})
    assert done.returncode == 1, done.stdout + done.stderr
    with open(os.path.join(disk, "run", "status.json")) as f:
        status = json.load(f)
    assert status["state"] == "failed", status
    message = status["message"]
    free = re.search(rf"The disk is full: free (\d+) MB in the runs folder {re.escape(disk)} ", message)
    assert free, message
    assert "Errno" not in message and "memory" not in message.lower()
    assert leftovers(disk) == []
    with open(os.path.join(disk, "run", "events.jsonl")) as f:
        assert all(json.loads(line)["step"] for line in f)   # every line whole
    # Freeing what it says is enough for the same run: grow the disk by that much and run again.
    subprocess.run(["mount", "-o", f"remount,size={1 + int(free.group(1))}m", disk], check=True)
    again = cli("--run-dir", os.path.join(disk, "again"), *TINY_RUN, env={"BLINK_RUNS_DIR": disk})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done: Finished 30 steps." in again.stdout


def test_cli_refuses_a_read_only_runs_folder_in_plain_words(read_only_folder):
    done = cli("--run-dir", os.path.join(read_only_folder, "run"), *TINY_RUN)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"The runs folder {read_only_folder} is not writable" in done.stderr
    assert "Traceback" not in done.stderr and "Errno" not in done.stderr


def test_a_read_only_runs_folder_is_refused_then_one_filling_up_mid_run_fails_and_viewers_keep_the_page(
        tmp_path, mount):
    """One app on a small disk: read-only at launch (warned, Start refused), then writable and filled
    to its last byte mid-run (the run fails saying what to free, every viewer's poll answers)."""
    disk = mount("disk", "ro,size=8m")
    app = RunningApp(str(tmp_path), env={"BLINK_RUNS_DIR": disk}).wait_ready()
    try:
        warnings = [line for line in app.read_log().splitlines() if "is not writable" in line]
        assert len(warnings) == 1 and f"The runs folder {disk} " in warnings[0], app.read_log()
        client = app.client()
        with pytest.raises(AppError) as refused:
            client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=16,
                           precision="fp32", device="cpu", steps=50, api_name="/start")
        assert f"The runs folder {disk} is not writable" in str(refused.value)
        assert "Errno" not in str(refused.value)
        assert client.predict(api_name="/status")["run"] == ""   # no run began

        subprocess.run(["mount", "-o", "remount,rw", disk], check=True)   # the host fixes it: Start works
        client.predict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=16,
                       precision="fp32", device="cpu", steps=100000, log_every=5, grid_every=10,
                       checkpoint_every=1000, api_name="/start")
        wait_for(lambda: app.status().get("step", 0) >= 5, timeout=300, what="training")
        filler = os.path.join(disk, "filler")
        with open(filler, "wb", buffering=0) as f:   # fill the disk to its last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
            try:
                while True:
                    f.write(b"\0")
            except OSError:
                pass
        # Every poll answers (none raises), until the run shows failed with what to do.
        status = wait_for(lambda: (s := app.status())["state"] == "failed" and s,
                          timeout=120, what="the run to fail")
        message = status["message"]
        assert re.search(rf"The disk is full: free \d+ MB in the runs folder {re.escape(disk)} ", message), message
        assert "Errno" not in message and "memory" not in message.lower()
        assert isinstance(client.predict(api_name="/stop"), str)   # a message, not an error
        assert leftovers(disk) == []
        # Once space is freed the failure is on the disk too, for a restarted UI or the CLI.
        os.remove(filler)
        run_status = os.path.join(disk, status["run"], "status.json")
        wait_for(lambda: app.status() and json.load(open(run_status))["state"] == "failed",
                 timeout=30, what="the failure to be written")
    finally:
        app.stop()
