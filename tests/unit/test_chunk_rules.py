"""What a chunk of a ZeroGPU run decides from the run directory alone (app/chunks.py): what ended
it, what a call asks for, and what the page says about the GPU a chunk gets."""

from app import chunks
from app.train_form import precision_choices, time_note
from app.ui import DeviceCache
from core.plan import DataFacts, make_plan
from core.config import TrainConfig
from core.rundir import RunDir
from core.train import Chunk
from tests.filehelpers import cpu_plan


def make_run(tmp_path, **status) -> RunDir:
    run = RunDir.create(cpu_plan(steps=1000), str(tmp_path))
    run.write_status("running", "Training...", **status)
    return run


def test_what_ended_a_chunk_is_read_from_what_it_wrote_not_from_a_pid(tmp_path):
    run = make_run(tmp_path, chunk=2, chunk_ended=2, pid=4242)
    assert chunks.outcome(run, 3) == "never began"   # the same worker pid, but chunk 3 never wrote its number
    run.write_status("running", "Training...", chunk=3)
    assert chunks.outcome(run, 3) == "aborted"
    run.write_status("running", "Chunk 3 ended at step 90", chunk_ended=3)
    assert chunks.outcome(run, 3) == "ended"


def test_an_aborted_chunk_pauses_at_its_checkpoint_and_names_the_steps_lost(tmp_path):
    run = make_run(tmp_path, chunk=4, chunk_ended=3, step=130, saved_step=100)
    for step in (95, 100, 105, 130):
        run.append_event({"step": step, "loss_d": 1.0})
    chunks.after_abort(run, 4, "GPU task aborted")
    status = run.read_status()
    assert (status.state, status.step, status.saved_step) == ("paused", 100, 100)
    assert status.message == ("Paused at step 100: chunk 4 was aborted while training, at step 130 (GPU task "
                              "aborted). The 30 steps since the checkpoint at step 100 are lost; press Resume to "
                              "go on from there.")
    assert [e["step"] for e in run.read_events()[0]] == [95, 100]


def test_a_call_asks_for_what_the_chunk_needs(tmp_path):
    run = make_run(tmp_path, steps=1000, step=0)
    assert chunks.call_seconds(Chunk(1, 45.0), run.path) == 45 + chunks.FIRST_CALL_MARGIN_SECONDS == 60
    # Measured: 4 s besides training, 10 steps a second; 900 steps left fill the chunk.
    run.write_status("running", "", step=100, steps_per_second=10.0, chunk_ended=1, chunk_margin=4.0)
    assert chunks.call_seconds(Chunk(2, 45.0), run.path) == 51
    # 50 steps left take 5 s (6 s with a fifth to spare): the last call asks for that, not 45 s.
    run.write_status("running", "", step=950, steps_per_second=10.0, chunk_ended=8, chunk_margin=4.0)
    assert chunks.call_seconds(Chunk(9, 45.0), run.path) == 12


def test_on_zero_gpu_the_page_describes_the_gpu_a_chunk_gets(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.delenv("BLINK_CHUNK_SECONDS", raising=False)
    info = DeviceCache().get("auto")
    assert (info.kind, info.name) == ("cuda", "NVIDIA H200 MIG 3g.71gb (ZeroGPU)")
    assert {value for label, value in precision_choices(info) if label == value} == {"fp32", "fp16", "bf16"}
    assert DeviceCache().get("cpu").kind == "cpu"   # Device: cpu trains on the Space's CPU, in one piece
    # Only a GPU run trains in GPU calls: the Space's CPU, XLA:CPU too, trains in one piece.
    assert [chunks.chunk_seconds(device) for device in ("auto", "cuda", "cpu", "xla-cpu")] == [45.0, 45.0, None, None]
    config = TrainConfig(steps=2000, batch_size=128)
    plan = make_plan(config, info, DataFacts(6000, 28, 1))
    assert time_note(plan, str(tmp_path)).startswith(
        "On ZeroGPU a run trains in turns, one GPU call each with 45 s of training on NVIDIA H200 MIG 3g.71gb")
    # Once a chunked run of the same settings measured its speed, the estimate is in turns.
    run = RunDir.create(cpu_plan(config), str(tmp_path))
    run.write_status("running", "", device_kind="cuda", preset="dcgan64", gan="dcgan", batch_size=128, resolution=64,
                     images_per_second=1280.0)
    assert time_note(plan, str(tmp_path)) == (
        "On ZeroGPU: each 45-s turn of NVIDIA H200 MIG 3g.71gb (ZeroGPU) trains about **450 steps**, so 2,000 "
        "steps take about 5 turns (as a run of these settings measured on this server).")


def test_a_spawned_child_is_no_space_main_process():
    """A process the app spawns imports app.py as its main module (`__mp_main__`) first of all;
    there it drops ZeroGPU's variables, before anything imports `spaces` (Gradio does), which
    would patch its torch to report a GPU it does not have."""
    import os
    import subprocess
    import sys
    from tests.apphelpers import ROOT
    child = ("import os, runpy, sys; runpy.run_path('app.py', run_name='__mp_main__'); "
             "import gradio; print(os.environ.get('SPACES_ZERO_GPU'), 'spaces.zero.torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": "http://127.0.0.1:9"})
    assert out.stdout.split() == ["None", "False"], out.stderr[-2000:]
