"""What one XLA:CPU device does with the project's parts, from one child process
(tests/xla_scripts/facts.py: the torch_xla import is paid once): the gradient penalty, the shipped
generator's images, the bf16 autocast policy, the trainer's step settling to one graph, and a
compile mid-run said in the status."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from tests.xla.xlahelpers import ROOT, run_script

pytestmark = pytest.mark.xla
SHIPPED = os.path.join(ROOT, "assets", "generator")


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("facts")
    run_script("facts.py", folder / "facts.json", SHIPPED, folder / "images.npy", CPU_NUM_DEVICES="1")
    with open(folder / "facts.json") as f:
        return {**json.load(f), "images": np.load(folder / "images.npy")}


def test_gradient_penalty_on_xla_cpu_matches_cpu_and_critic_steps_reuse_one_graph(facts):
    result = facts["penalty"]
    assert result["gp_xla"] == pytest.approx(result["gp_cpu"], rel=1e-4, abs=1e-6)
    assert result["gp_cpu"] > 0.1 and result["grad_scale"] > 0.01     # a case with real gradients
    assert result["grad_diff"] < 1e-4 * result["grad_scale"]
    assert math.isfinite(result["gp_last"])
    counts = result["compiles"]
    assert counts[1] == counts[2], f"critic steps kept compiling: {counts}"
    assert not set(result["fallbacks"]) - {"aten::_local_scalar_dense"}


def test_xla_cpu_gives_the_same_images_as_cpu_eager(facts):
    """Latents come from the CPU, so a seed is the same image on XLA; only float rounding differs."""
    from core import sample
    assert facts["images_device"].startswith("xla")
    generator, _ = sample.load_run_generator(SHIPPED)
    cpu = sample.generate(generator, sample.latents(3, 16, generator.z_dim))
    assert facts["images"].shape == cpu.shape
    assert np.abs(facts["images"] - cpu).max() < 2e-3     # tanh outputs in [-1, 1]; 1/127.5 is one grey level


@pytest.mark.parametrize("gan", ["dcgan", "wgan-gp", "hinge"])
def test_autocast_bf16_policy_on_xla(facts, gan):
    """Convolutions in bf16; normalisation, generator output and every loss in fp32."""
    assert facts["kind"] == "xla-cpu"
    layers, values = facts["autocast"]["layers"][gan], facts["autocast"]["losses"][gan]
    convs = {k: v for k, v in layers.items() if "Conv" in k}
    norms = {k: v for k, v in layers.items() if "Norm" in k}
    assert convs and all(v == ["bfloat16"] for v in convs.values()), layers
    assert norms and all(v == ["float32"] for v in norms.values()), layers
    assert values["bn_running_mean"] == ["torch.float32"]
    assert all(v == "torch.float32" for k, v in values.items() if k != "bn_running_mean"), values


# Adam's bias corrections as Python floats became graph constants once they rounded to 1.0 (torch_xla's
# special scalars), and the step compiled again mid-run: at betas 0.3, from update 15. On the device
# (capturable) they never change the graph. DCGAN's step here; hinge (in bf16, a TPU's default) and
# WGAN-GP cross the same point in their 4-device trainer runs (test_xla_types.py).
def test_compiles_stop_after_warm_up_past_the_steps_where_adams_corrections_round_to_one(facts):
    compiles = facts["compiles"]["settling"]
    # Steps 1 and 2 are different graphs (the optimizers create their state in step 1); then none.
    assert len(compiles) == 16 and compiles[-1] == compiles[2], compiles


def test_settings_changed_mid_run_compile_what_the_page_says(facts):
    """What the page tells a TPU's host (app/ui.py, Change while training): the first change
    compiles the step again; the learning rates are values the step reads, so once they have
    changed they change again with no compile; a new beta is a constant of the step's graph,
    compiled once and reused. (Were one of these to stop holding, the page's words must change.)"""
    changed = facts["compiles"]["changed"]
    first, again, beta = changed["rates"], changed["rates again"], changed["beta1"]
    assert first[2] > first[0], changed
    assert again[0] == again[1] == again[2], changed
    assert beta[1] == beta[0] + 1 and beta[2] == beta[1], changed


def test_a_compile_after_the_first_steps_is_said_in_the_status_while_it_lasts(facts):
    """On a TPU a new graph mid-run (the grid's, the quality meter's) stalls the run for up to
    minutes: the status says so, from the heartbeat's thread, while the trainer waits on the compile."""
    said = facts["said"]
    assert said["state"] == "compiling", said
    assert said["message"] == "XLA is compiling a new graph after step 16 (later steps reuse it)...", said


def test_a_cached_graph_that_cannot_be_loaded_is_counted_and_said(tmp_path):
    """The second process finds its graph in the cache and cannot load it (torch_xla 2.8 and 2.9 on a
    TPU, pytorch/xla#9094; XLA:CPU here): Diagnostics and the doctor say so, and that it compiles again."""
    from core.devices import cache_in_words
    counts = []
    for session in ("first", "second"):
        run_script("cache_reload.py", tmp_path / "cache", tmp_path / f"{session}.json", CPU_NUM_DEVICES="1")
        with open(tmp_path / f"{session}.json") as f:
            result = json.load(f)
        assert result["total"] == 8 * 8 * 9
        counts.append(result["cache"])
    assert counts[0] == {"hit": 0, "miss": 1, "unreadable": 0}
    assert counts[1]["unreadable"] >= 1 and counts[1]["hit"] == 0, counts
    assert "found but not loadable" in cache_in_words(counts[1]) and "compiles again" in cache_in_words(counts[1])
    assert cache_in_words(counts[0]) == "0 hits, 1 misses"


def test_a_batchs_noise_is_split_over_the_devices_without_probing_for_jax(tmp_path):
    """On torch_xla 2.8 each xs.mark_sharding that finds no jax logs a warning: Kaggle's notebook got
    one per critic update. The runtime marks each step's noise without trying to import jax or torchax."""
    run_script("sharding_imports.py", tmp_path / "imports.json", CPU_NUM_DEVICES="4")
    with open(tmp_path / "imports.json") as f:
        result = json.load(f)
    assert result["devices"] == 4
    assert result["through_runtime"] == 0 and result["through_mark_sharding"] >= 5, result
