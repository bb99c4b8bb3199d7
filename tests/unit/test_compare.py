"""Runs side by side (issue 41): the comparison starts' one change, the differences said in words,
where two runs may train at once and how a trainer takes its share of the CPU, and what the live
feed sends every page about a run beside the live one (ended, or training on), on seeded runs (the
trained road, comparisons at once and queued behind real runs: tests/app/test_app.py's short run)."""
from __future__ import annotations

import json
import os
import time

import pytest

from app.compare import ComparisonRefused, at_once_problem
from app.job import Job
from app.live import LiveFeed
from app.views import differences_words
from core.config import COMPARISONS, ConfigError, TrainConfig, comparison
from core.control import Control
from core.rundir import RunDir
from core.status import Status
from tests.apphelpers import wait_for
from tests.clihelpers import start_cli
from core.plan import DataFacts
from tests.filehelpers import cpu_plan


def test_each_comparison_changes_one_setting_and_keeps_the_seed_and_length():
    base = TrainConfig(gan="dcgan", precision="fp32", batch_size=128, seed=5, steps=300)
    changed = {name: comparison(cpu_plan(base), name) for name in COMPARISONS}
    assert changed["precision"].precision == "bf16"
    assert comparison(cpu_plan(changed["precision"]), "precision").precision == "fp32"
    assert changed["batch_size"].batch_size == 32
    assert comparison(cpu_plan(changed["batch_size"]), "batch_size").batch_size == 256
    assert changed["lr_d"].lr_d == pytest.approx(10 * cpu_plan(base).config.lr_d)
    # Another GAN type takes its own learning rates and betas, not the first type's.
    wgan = comparison(cpu_plan(gan="dcgan", lr_d=2e-4, lr_g=2e-4, beta1=0.5), "gan")
    assert wgan.gan == "wgan-gp" and (wgan.lr_d, wgan.lr_g, wgan.beta1, wgan.n_critic) == (None, None, None, None)
    assert comparison(cpu_plan(wgan), "gan").gan == "dcgan" and comparison(cpu_plan(gan="rpgan"), "gan").gan == "dcgan"
    assert comparison(cpu_plan(), "gan").gan == "dcgan"   # the CPU's default, the relativistic pairing
    for name, config in changed.items():
        assert base.differences(config, ignore=()) == [name], name
    with pytest.raises(ConfigError, match="Compare: choose one of"):
        comparison(cpu_plan(base), "steps")


def test_the_differences_are_said_with_the_pages_labels():
    def planned(**values):   # as the runs' plans hold them: every value resolved
        return cpu_plan(**values).config
    here, there = planned(lr_d=2e-3, gan="wgan-gp"), planned(lr_d=2e-4, gan="dcgan")
    words = differences_words(here, there)
    assert "GAN type WGAN-GP here, DCGAN (non-saturating) there" in words
    assert "D's learning rate 0.002 here, 0.0002 there" in words
    # A value left to the GAN type is compared as the type sets it: WGAN-GP's 5 critic updates.
    assert "D updates per G update 5 here, 1 there" in words
    assert differences_words(planned(), planned()) == "the same settings"
    from app.views import differences_captions
    assert differences_captions(planned(gan="dcgan", lr_d=3e-2), planned(gan="dcgan", lr_d=3e-3)) == \
        ("D's learning rate 0.03", "D's learning rate 0.003")
    assert differences_captions(planned(), planned()) == ("", "")


def seed_run(root: str, config: TrainConfig, grid_steps: tuple[int, ...], loss_d: float, state: str = "done") -> RunDir:
    """A run as a trainer leaves it: config, status, loss points every 25 steps and grids."""
    import numpy as np
    run = RunDir.create(cpu_plan(config, data=DataFacts() if config.dataset != "bundled-mnist" else None), root)
    images = np.zeros((4, 1, 28, 28), np.float32)
    for step in grid_steps:
        run.save_grid(images, step, columns=2)
    for step in range(25, config.steps + 1, 25):
        run.append_event({"step": step, "loss_d": loss_d, "loss_g": 1.0})
    run.write_status(state, "Finished.", step=config.steps, steps=config.steps, gan=config.gan)
    time.sleep(1.01)   # run folders are named by the second they were made in
    return run


def message(feed: LiveFeed, kind: str = "full") -> dict:
    feed.refresh()
    return json.loads(getattr(feed.current, kind)[len(b"data: "):])


def grid_answer(feed: LiveFeed, run: str, step: int) -> int:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient
    with TestClient(Starlette(routes=feed.routes())) as http:
        return http.get(f"/live/grid/{run}/{step}").status_code


def test_every_page_gets_the_compared_runs_grid_at_the_live_step_its_curves_and_what_differs(tmp_path):
    root = str(tmp_path)
    other_images = seed_run(root, TrainConfig(dataset="fashion-mnist", steps=100), (100,), 0.9)
    earlier = seed_run(root, TrainConfig(steps=300, seed=3), (100, 200, 300), 0.5)
    live = seed_run(root, TrainConfig(steps=250, seed=3, lr_d=2e-3), (100, 250), 0.7, state="stopped")
    job = Job(root)
    feed = LiveFeed(job)
    assert job.run.name == live.name
    # Only earlier runs of the live run's images may stand beside it.
    assert [run.name for run in job.comparison.runs()] == [earlier.name]
    with pytest.raises(ComparisonRefused, match="No earlier run"):
        job.comparison.show(other_images.name)
    assert grid_answer(feed, earlier.name, 200) == 404   # nobody is shown it yet

    assert earlier.name in job.comparison.show(earlier.name)
    shown = message(feed)
    # The live grid is at step 250: the compared run's grid at the nearest step before it.
    assert shown["compare"]["run"] == earlier.name and shown["compare"]["grid"] == f"live/grid/{earlier.name}/200"
    assert shown["compare"]["differences"] == ("Training length (steps) 250 here, 300 there; "
                                               "D's learning rate 0.002 here, 0.003 there")
    assert shown["compare_points"]["loss_d"] == [[step, 0.5] for step in range(25, 301, 25)]
    assert grid_answer(feed, earlier.name, 200) == 200 and grid_answer(feed, other_images.name, 100) == 404
    # Its curves go to a page once (and again on connect): later messages carry the live run's news alone.
    live.append_event({"step": 260, "loss_d": 0.7, "loss_g": 1.0})
    assert "compare_points" not in message(feed, "delta") and message(feed)["compare_points"]
    # Retention never deletes the run shown beside the live one.
    job.keep_runs = 1
    assert other_images.name in job.prune() and os.path.isdir(earlier.path)

    job.comparison.show("")
    alone = message(feed, "delta")
    assert alone["compare"] is None and alone["compare_points"] == {}
    assert grid_answer(feed, earlier.name, 200) == 404


def test_a_comparison_queued_behind_a_run_that_is_stopped_does_not_start(tmp_path):
    root = str(tmp_path)
    config = TrainConfig(steps=100)
    run = seed_run(root, config, (100,), 0.5, state="running")
    run.write_status("running", "Training...", step=50, steps=100, gan="dcgan", pid=os.getpid())
    job = Job(root)
    assert job.is_active()
    answer = job.comparison.start(cpu_plan(comparison(run.read_plan(), "lr_d")), run, COMPARISONS["lr_d"])
    assert answer.startswith(f"Queued: run `{run.name}` again with D's learning rate x10")
    assert job.comparison.note == f"Next: run {run.name} again with D's learning rate x10, when it finishes."
    with pytest.raises(ComparisonRefused, match="already waiting"):
        job.comparison.start(cpu_plan(comparison(run.read_plan(), "batch_size")), run, COMPARISONS["batch_size"])
    run.write_status("stopped", "Stopped.", step=60, steps=100, gan="dcgan")
    wait_for(lambda: "did not start" in job.comparison.note, 10, what="the queued comparison's end")
    assert job.comparison.note == f"The comparison did not start: run {run.name} ended stopped, not finished."
    assert job.run.name == run.name and len(os.listdir(root)) == 1


def test_two_runs_train_at_once_on_a_cuda_gpu_or_a_cpu_of_two_cores_or_more():
    assert at_once_problem(Status(device_kind="cpu"), cores=2) == ""
    assert at_once_problem(Status(device_kind="cuda"), cores=1) == ""
    assert at_once_problem(Status(device_kind="cpu"), cores=1) == "the CPU has one core"
    for kind in ("tpu", "xla-cpu"):
        assert "XLA devices" in at_once_problem(Status(device_kind=kind), cores=8)
    assert "ZeroGPU" in at_once_problem(Status(device_kind="cuda", chunk=2), cores=8)
    assert "several processes" in at_once_problem(Status(device_kind="cuda", processes=2), cores=8)


def test_a_trainer_uses_the_threads_its_run_directory_asks_for_then_all_again(tmp_path):
    """The trainer's side of two runs at once on a CPU (the job's side: tests/app/test_app.py): a
    share asked before it starts holds from its first step; 0 gives it every thread again."""
    run = RunDir(str(tmp_path / "run"))
    os.makedirs(run.path)
    run.share_cpu(1)   # as the job asks it of a comparison started at once, before its trainer starts
    process = start_cli(["-m", "core.train", "--device", "cpu", "--preset", "fast", "--batch-size", "8",
                         "--steps", "100000", "--log-every", "2", "--quality-every", "0", "--run-dir", run.path],
                        env={**os.environ, "OMP_NUM_THREADS": "2"})
    def threads():
        return run.read_status().diagnostics.get("cpu_threads")
    try:
        wait_for(lambda: run.read_status().step > 0, 120, interval=0.1, what="training")
        assert threads() == 1
        run.share_cpu(0)
        wait_for(lambda: threads() == 2, 60, interval=0.1, what="every thread again")
        run.request("stop")
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    # Taken once: a share read again is not acted on again.
    control = Control(run)
    run.share_cpu(1)
    assert control.cpu_threads() == 1 and control.cpu_threads() is None


def test_a_compared_run_that_trains_on_sends_its_new_curves_and_grids(tmp_path):
    root = str(tmp_path)
    beside = seed_run(root, TrainConfig(steps=300), (100,), 0.5, state="running")
    live = seed_run(root, TrainConfig(steps=300, lr_d=2e-3), (100,), 0.7, state="running")
    job = Job(root)
    feed = LiveFeed(job)
    job.comparison.show(beside.name)
    assert message(feed)["compare_points"]["loss_d"][-1] == [300, 0.5]
    # The run beside logs and draws on while the live run is quiet: every page is sent its new points.
    import numpy as np
    beside.append_event({"step": 325, "loss_d": 0.4, "loss_g": 1.0})
    beside.save_grid(np.zeros((4, 1, 28, 28), np.float32), 200, columns=2)
    beside.write_status("running", "Training...", step=325, steps=400, gan="dcgan")
    delta = message(feed, "delta")
    assert delta["compare_points"]["loss_d"][-1] == [325, 0.4]
    assert delta["compare"]["grid"] == f"live/grid/{beside.name}/100"   # at the live grid's step
    # The live run's next grid: the one beside at that step.
    live.save_grid(np.zeros((4, 1, 28, 28), np.float32), 200, columns=2)
    live.append_event({"step": 325, "loss_d": 0.7, "loss_g": 1.0})
    assert message(feed, "delta")["compare"]["grid"] == f"live/grid/{beside.name}/200"
