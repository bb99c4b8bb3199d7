"""One run over two processes under torchrun (DDP, gloo on the CPU), started as a user starts it:
`python -m torch.distributed.run --standalone --nproc-per-node 2 -m core.train --device cpu ...`,
or as two machines do, one torchrun a node (`--nnodes 2 --node-rank K --master-addr ...`).

Two launches, each a real run that its tests read (a launch is three or four Python processes,
each importing torch: the most this file can afford):
- DCGAN (BatchNorm in G and D) over two nodes of one process each on loopback, logging every step,
  paused, resumed and stopped through its request file;
- WGAN-GP (the gradient penalty's double backward through DDP), logging every step, its rank 1
  killed with SIGKILL after a checkpoint; one process then resumes it to its end.
The one-process runs they are compared with, and the resume, run in this process through the CLI's
main (a run of one process, as `python -m core.train` trains it). Tiny runs: preset fast at 28x28,
batch 16, no quality meter. Every subprocess and every wait has a timeout.
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest

from core.rundir import RunDir
from tests.apphelpers import ROOT, alive, free_port, paused_beat

TIMEOUT = 180   # seconds for one launch to reach what a test waits for: generous for a loaded 2-core machine
ARGS = ["--device", "cpu", "--preset", "fast", "--batch-size", "16", "--log-every", "1", "--quality-every", "0",
        "--lr-decay-start", "1"]   # constant learning rates: a run's length does not change its first steps
COMPARED_STEPS = 3


# The processes sum a batch's gradients and BatchNorm's statistics in another order than one process:
# the results differ in their last bits, and a GAN at the fast preset's learning rates amplifies that
# step after step, as the 4-device XLA run does (tests/xla/test_xla.py, loss_match_tolerance; the
# amplification is in bench/README.md, "Several processes: torchrun"). So the first two steps must
# agree to the logged digits (BatchNorm over each process's 8 images, or the same images twice, is
# off by far more at step 1) and the third within 1%.
def loss_match_tolerance(step: int) -> float:
    return 1e-4 if step <= 2 else 1e-2 if step <= 4 else math.inf


class Launch:
    """Two ranks of core.train under `python -m torch.distributed.run`, as subprocesses: one torchrun
    with two processes, or (nodes=2) two torchruns of one process each that rendezvous over
    loopback, as two machines do with the README's multi-node command."""

    def __init__(self, run_path: str, *args: str, nodes: int = 1):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
        if nodes == 1:
            launchers = [["--standalone", "--nproc-per-node", "2"]]
        else:
            port = str(free_port())
            launchers = [["--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                          "--master-addr", "127.0.0.1", "--master-port", port] for rank in range(2)]
        self.processes = [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "core.train", *args, "--run-dir", run_path],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for launcher in launchers]
        self.run = RunDir(run_path)
        self.ranks: dict[int, int] = {}   # rank -> pid, read from torchrun's children
        self.paused: tuple[int, int, int] | None = None   # what the stopped_run fixture saw of its pause

    def wait_for(self, ready, what: str):
        """Poll the run's status until ready(status); learn the ranks' pids on the way."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if len(self.ranks) < 2:
                self.ranks = {rank: pid for p in self.processes for rank, pid in _ranks_of(p.pid).items()}
            status = self.run.read_status()
            if ready(status):
                return status
            for p in self.processes:
                assert p.poll() is None, f"torchrun ended before {what}:\n{p.stdout.read()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {TIMEOUT} s: {self.run.read_status()}")

    def end(self) -> tuple[int, str]:
        """The torchruns' exit status (the first that is not 0) and their output, once they have ended."""
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in self.processes]
        return next((p.returncode for p in self.processes if p.returncode), 0), "".join(outputs)

    def left(self) -> list[int]:
        return [pid for pid in (*(p.pid for p in self.processes), *self.ranks.values()) if alive(pid)]

    def clean_up(self) -> None:
        for pid in self.left():
            os.kill(pid, signal.SIGKILL)
        for p in self.processes:
            p.wait(timeout=30)


def _ranks_of(torchrun_pid: int) -> dict[int, int]:
    """torchrun's worker processes by their RANK."""
    ranks = {}
    try:
        for task in os.listdir(f"/proc/{torchrun_pid}/task"):
            with open(f"/proc/{torchrun_pid}/task/{task}/children") as f:
                for pid in map(int, f.read().split()):
                    with open(f"/proc/{pid}/environ", "rb") as env:
                        values = dict(item.split(b"=", 1) for item in env.read().split(b"\0") if b"=" in item)
                    if b"RANK" in values:
                        ranks[int(values[b"RANK"])] = pid
    except OSError:   # a process ended or not yet started: asked again at the next poll
        pass
    return ranks


def _one_process_run(tmp_path_factory, gan: str) -> str:
    """The same run in one process, through the CLI in this process: its first COMPARED_STEPS steps."""
    from core import train
    path = str(tmp_path_factory.mktemp(f"one-{gan}") / "run")
    assert train.main(["--gan", gan, *ARGS, "--steps", str(COMPARED_STEPS), "--run-dir", path]) == 0
    return path


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """DCGAN over two nodes of one process each (rendezvous over loopback), paused and resumed through
    the request file once it has logged the compared steps, then stopped. launch.paused: the steps
    at the pause and a second later, and the first step seen after Resume."""
    launch = Launch(str(tmp_path_factory.mktemp("stopped") / "run"), "--gan", "dcgan", *ARGS, "--steps", "100000",
                    nodes=2)
    try:
        launch.wait_for(lambda status: status.step >= COMPARED_STEPS and len(launch.ranks) == 2, "the compared steps")
        launch.run.request("pause")
        paused = launch.wait_for(lambda status: status.state == "paused", "the pause").step
        still = paused_beat(launch.run.path)["step"]   # a beat after the pause: what returned last
        launch.run.change_settings({"lr_d": 1e-3})   # as the host's Change while training asks
        launch.run.request("resume")
        going = launch.wait_for(lambda status: status.state == "running" and status.step > still, "the resumed run").step
        launch.paused = (paused, still, going)
        launch.run.request("stop")
        code, output = launch.end()
        yield launch, code, output
    finally:
        launch.clean_up()


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """WGAN-GP over two processes, rank 1 killed with SIGKILL once a checkpoint is saved."""
    launch = Launch(str(tmp_path_factory.mktemp("killed") / "run"), "--gan", "wgan-gp", *ARGS, "--steps", "100000",
                    "--checkpoint-every", "3")
    try:
        launch.wait_for(lambda status: status.saved_step >= 3 and len(launch.ranks) == 2, "a checkpoint")
        os.kill(launch.ranks[1], signal.SIGKILL)
        code, output = launch.end()
        yield launch, code, output
    finally:
        launch.clean_up()


def test_two_processes_train_what_one_process_trains_and_only_rank_0_writes(stopped_run, killed_run,
                                                                             tmp_path_factory):
    """The same global batch of 16 and seed in two processes and in one: the logged losses agree
    (each process trains its own 8 of the batch, and BatchNorm normalises over all 16), for DCGAN
    and for WGAN-GP, whose penalty differentiates D's gradient through DDP; and the run directory is
    rank 0's alone: each step logged once, the status and the heartbeat its pid's."""
    for (launch, _, output), gan in ((stopped_run, "dcgan"), (killed_run, "wgan-gp")):
        one, two = (RunDir(path).read_events()[0] for path in (_one_process_run(tmp_path_factory, gan), launch.run.path))
        keys = [key for key in one[0] if key not in ("step", "time")]
        pairs = list(zip(one, two))[:COMPARED_STEPS]
        assert [a["step"] for a, _ in pairs] == [b["step"] for _, b in pairs] == list(range(1, COMPARED_STEPS + 1))
        far = [(a["step"], k, a[k], b[k]) for a, b in pairs for k in keys
               if abs(a[k] - b[k]) > loss_match_tolerance(a["step"]) * max(1.0, abs(a[k]))]
        assert not far, (gan, far)
        logged = [event["step"] for event in two if "loss_d" in event]
        assert len(logged) == len(set(logged)), f"a step logged twice: {logged}"
        assert launch.run.read_status().pid == launch.run.read_heartbeat()["pid"] == launch.ranks[0]
        assert output.count("run directory:") == 1, output[-3000:]
        assert launch.run.read_status().layout == "2 processes (DDP, gloo), batch 16 = 8 per process"
        # Every page's status line says so, not "in one process".
        from app import views
        line = views.status_line(launch.run.read_status())
        assert "2 processes (DDP, gloo), batch 16 = 8 per process" in line and "one process" not in line, line
        # And Diagnostics, as the status says it (not "1 device: the CPU").
        rows = dict(views.diagnostics_rows(launch.run.read_status()))
        assert rows["Devices"] == "2 processes (DDP, gloo), batch 16 = 8 per process", rows


def test_a_stop_request_ends_every_rank_stopped_with_a_checkpoint(stopped_run):
    launch, code, output = stopped_run
    status = launch.run.read_status()
    assert code == 0, output[-3000:]   # torchrun's status: every rank ended cleanly
    assert status.state == "stopped" and status.message == f"Stopped by request at step {status.step}.", status
    assert status.saved_step == status.step >= COMPARED_STEPS and launch.run.has_checkpoint()
    assert launch.left() == []


def test_two_nodes_over_loopback_pause_together_and_resume(stopped_run):
    """The README's two-machine command, both nodes on this one: rank 0 hears the Pause and every
    rank waits with it (no step while paused); Resume goes on from there, with a changed setting."""
    launch, _, output = stopped_run
    paused, still, going = launch.paused
    assert paused == still >= COMPARED_STEPS and going > still, launch.paused
    assert output.count("run directory:") == 1, output[-3000:]   # rank 0 alone, on node 0
    # A settings change asked while paused: rank 0 hands it to every rank at the next log step, and
    # the run trains on with it (a rank left out would wait in that exchange, and the Stop never end).
    changes = [event for event in launch.run.read_events()[0] if "settings" in event]
    assert [(e["step"], e["settings"]) for e in changes] == [(still, {"lr_d": 1e-3})], changes
    assert launch.run.read_config().lr_d == 1e-3


def test_a_killed_rank_fails_the_run_with_its_checkpoint_and_one_process_resumes_it(killed_run):
    """kill -9 of rank 1: rank 0 says so in the status, with the last checkpoint kept, torchrun ends
    the rest, and no process is left; then one process continues the run from that checkpoint (a
    two-process checkpoint holds plain weights) to its end."""
    from core import train
    launch, code, output = killed_run
    status = launch.run.read_status()
    assert code != 0
    assert status.state == "failed" and "another of this run's 2 processes ended" in status.message, status.message
    saved = status.saved_step
    assert saved >= 3 and f"The last checkpoint (step {saved}) is kept" in status.message
    assert launch.left() == []
    assert train.main(["--resume", launch.run.path, "--steps", str(saved + 3)]) == 0
    resumed = launch.run.read_status()
    assert resumed.state == "done" and resumed.step == saved + 3 and "1 device, one process" in resumed.layout
    logged = [event["step"] for event in launch.run.read_events()[0] if "loss_d" in event]
    assert logged == list(range(1, saved + 4)), logged   # the steps after the checkpoint, logged again
