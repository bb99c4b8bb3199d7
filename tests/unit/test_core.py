"""The engine without the UI: config checks, models, run directory, CLIs."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from core.config import ConfigError, TrainConfig, validate
from core import gans
from core.models import build
from core.rundir import RunDir
from tests.clihelpers import run_cli
from tests.filehelpers import cpu_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("change, words", [
    (dict(batch_size=0), "batch_size"),
    (dict(dataset="imagenet"), "Dataset 'imagenet'"),
    (dict(precision="fp8"), "Precision 'fp8'"),
    (dict(gan="vae"), "GAN type"),
    (dict(lr_g=5.0), "lr_g"),
    (dict(conditional="yes"), "Class-conditional"),
    (dict(n_critic=0), "n_critic"),
    (dict(dataset="folder"), "data_path"),
])
def test_invalid_config_is_refused_with_a_specific_message(change, words):
    with pytest.raises(ConfigError, match=words):
        validate(TrainConfig(**change).resolved())


def test_batch_larger_than_dataset_and_unsupported_precision_are_refused():
    with pytest.raises(ConfigError, match="larger than the dataset"):
        validate(TrainConfig(batch_size=128).resolved(), dataset_size=100)
    caps = {"name": "CPU", "precision_refused": {"bf16": "no native bfloat16"}}
    with pytest.raises(ConfigError, match="no native bfloat16"):
        validate(TrainConfig(precision="bf16").resolved(), device_caps=caps)


def test_config_round_trips_and_resolves_gan_defaults():
    config = TrainConfig(gan="wgan-gp", batch_size=32)
    assert TrainConfig.from_json(config.to_json()) == config
    resolved = validate(config.resolved())
    assert (resolved.n_critic, resolved.beta1, resolved.beta2) == (5, 0.0, 0.9)
    # DCGAN's learning rate: measured 3e-3 for the CPU preset, the paper's 2e-4 for the seed's network.
    assert TrainConfig().resolved("fast").lr_g == 3e-3
    assert TrainConfig().resolved("dcgan64").lr_g == validate(TrainConfig().resolved()).lr_g == 2e-4
    assert TrainConfig(lr_g=5e-4).resolved("fast").lr_g == 5e-4          # a chosen value wins
    with pytest.raises(ConfigError, match="Unknown config field"):
        TrainConfig.from_dict({"batch": 3})


@pytest.mark.parametrize("channels, resolution, preset", [(1, 28, "fast"), (3, 32, "fast"), (3, 64, "dcgan64")])
def test_models_follow_the_data_shape(channels, resolution, preset):
    G, D = build(gans.get("dcgan"), preset, channels, resolution, z_dim=100)
    images = G(torch.randn(4, 100, 1, 1))
    assert images.shape == (4, channels, resolution, resolution)
    assert images.min() >= -1 and images.max() <= 1
    assert D(images).shape == (4,)


def test_dcgan64_is_the_seeds_network():
    G, D = build(gans.get("dcgan"), "dcgan64", 1, 64, z_dim=100)
    convt = [m for m in G.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    assert [m.out_channels for m in convt] == [512, 256, 128, 64, 1]
    convs = [m for m in D.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [m.out_channels for m in convs] == [64, 128, 256, 512, 1]
    assert abs(float(convt[0].weight.detach().std()) - 0.02) < 0.005   # N(0, 0.02) init


def test_latent_projection_computes_the_seeds_transposed_convolution():
    """G's first layer runs as a matrix product for speed; it must equal the ConvTranspose2d it replaces."""
    from core.models import LatentProjection
    projection = LatentProjection(100, 64, 7, 1, 0, bias=False)
    reference = torch.nn.ConvTranspose2d(100, 64, 7, 1, 0, bias=False)
    reference.load_state_dict(projection.state_dict())
    z = torch.randn(5, 100, 1, 1)
    torch.testing.assert_close(projection(z), reference(z), rtol=1e-5, atol=1e-6)


def test_logit_head_computes_the_seeds_final_convolution_in_both_memory_formats():
    from core.models import LogitHead
    head = LogitHead(64, 1, 7)
    reference = torch.nn.Conv2d(64, 1, 7)
    reference.load_state_dict(head.state_dict())
    features = torch.randn(5, 64, 7, 7)
    torch.testing.assert_close(head(features), reference(features), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(head(features.contiguous(memory_format=torch.channels_last)), reference(features),
                               rtol=1e-5, atol=1e-5)


def test_conditional_generator_draws_the_asked_classes_and_discriminator_needs_them():
    from core.models import default_labels
    G, D = build(gans.get("dcgan"), "fast", 1, 28, z_dim=100, classes=10)
    G.eval()
    z = torch.randn(12, 100, 1, 1)
    labels = default_labels(12, 10)
    assert labels.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    torch.testing.assert_close(G(z), G(z, labels))                                  # no labels: 0, 1, 2, ...
    torch.testing.assert_close(G(z, labels), G(z, torch.eye(10)[labels]))           # class weights work too
    assert (G(z, labels) - G(z, (labels + 1) % 10)).abs().max() > 1e-4               # the label matters
    images = G(z, labels)
    assert D(images, labels).shape == (12,)
    assert (D(images, labels) - D(images, (labels + 3) % 10)).abs().max() > 1e-6     # so does D's
    with pytest.raises(ValueError, match="labels"):
        D(images)


def test_conditional_off_trains_the_unconditional_gan_on_labelled_data(tmp_path):
    from PIL import Image

    from core import train
    run_path = tmp_path / "plain"
    assert train.main(["--conditional", "off", "--steps", "2", "--batch-size", "16", "--device", "cpu",
                       "--quality-every", "0", "--run-dir", str(run_path)]) == 0
    assert json.loads((run_path / "generator.json").read_text())["spec"]["classes"] == 0
    assert json.loads((run_path / "status.json").read_text())["classes"] == 0
    with Image.open(run_path / "grids" / "step_000002.png") as grid:
        assert grid.size == (8 * 30 + 2, 8 * 30 + 2)            # the seed's 64 samples, 8 x 8


@pytest.mark.parametrize("gan, kind", [("dcgan", "probability"), ("hinge", "logit"), ("rpgan", "pair")])
def test_every_grid_comes_with_ds_verdicts_on_its_fakes_and_on_real_images_of_the_same_classes(tmp_path, gan, kind):
    from PIL import Image

    from core import quality, train
    run_path = tmp_path / gan
    assert train.main(["--gan", gan, "--steps", "12", "--batch-size", "16", "--device", "cpu", "--grid-every", "6",
                       "--log-every", "6", "--quality-every", "0", "--run-dir", str(run_path)]) == 0
    run = RunDir(str(run_path))
    for step, _ in run.grids():
        verdicts = run.read_verdicts(step)
        assert verdicts["kind"] == kind and verdicts["columns"] == 10
        assert len(verdicts["fake"]) == len(verdicts["real"]) == 60   # the grid's 6 rows of the 10 digits
        if kind in ("probability", "pair"):
            assert all(0 <= v <= 1 for v in verdicts["fake"] + verdicts["real"])
    # The real images sit as the fakes do: column c holds real digits c (the shipped classifier says).
    with Image.open(run_path / "grids" / "real.png") as image:
        pixels = np.asarray(image.convert("L"))
    tiles = np.stack([pixels[2 + r * 30:2 + r * 30 + 28, 2 + c * 30:2 + c * 30 + 28] for r in range(6) for c in range(10)])
    digits = quality.classify(quality.load_classifier(), tiles)[1].argmax(1)
    assert (digits == np.arange(60) % 10).mean() >= 0.9, digits


def test_a_checkpoint_an_older_blink_saved_is_refused_with_the_reason(tmp_path):
    from core import train
    run_path = tmp_path / "old"
    assert train.main(["--steps", "2", "--batch-size", "16", "--device", "cpu", "--quality-every", "0",
                       "--run-dir", str(run_path)]) == 0
    checkpoint = torch.load(run_path / "checkpoint.pt", weights_only=False)
    del checkpoint["plan"]          # what an older Blink wrote: its config alone
    torch.save(checkpoint, run_path / "checkpoint.pt")
    assert train.main(["--resume", str(run_path), "--steps", "4"]) == 1
    status = json.loads((run_path / "status.json").read_text())
    assert status["state"] == "failed" and "older Blink" in status["message"]
    assert torch.load(run_path / "checkpoint.pt", weights_only=False)["step"] == 2   # nothing lost


def test_event_reader_tolerates_a_half_written_line(tmp_path):
    run = RunDir.create(cpu_plan(), root=str(tmp_path))
    run.append_event({"step": 1, "loss_d": 0.5})
    with open(run.file("events.jsonl"), "a") as f:
        f.write('{"step": 2, "loss')            # the trainer is mid-write
    events, offset = run.read_events()
    assert [e["step"] for e in events] == [1]
    with open(run.file("events.jsonl"), "a") as f:
        f.write('_d": 0.4}\n')
    more, _ = run.read_events(offset)
    assert more == [{"step": 2, "loss_d": 0.4}]


# ---- the run's status and config on disk, and resuming a run ------------------------------------
def test_a_status_an_older_blink_wrote_loads_and_round_trips(tmp_path):
    """status.json with fewer fields than today and one since dropped (hint): it loads, keeps its values."""
    from core.status import Status
    run = RunDir(str(tmp_path))
    assert run.read_status() == Status() and not run.read_status().state       # none written yet
    (tmp_path / "status.json").write_text(json.dumps(
        {"state": "failed", "message": "Training failed.", "updated": 1.0, "pid": 123, "step": 40, "hint": "smaller"}))
    status = run.read_status()
    assert (status.state, status.message, status.pid, status.step) == ("failed", "Training failed.", 123, 40)
    assert status.saved_step == Status.saved_step and status.diagnostics == {}   # the fields it lacked
    assert Status.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    run.write_status("stopped", "Stopped.", saved_step=40)   # the fields not given keep their values
    written = json.loads((tmp_path / "status.json").read_text())
    assert (written["state"], written["step"], written["saved_step"], written["pid"]) == ("stopped", 40, 40, 123)
    assert "hint" not in written and set(written) == set(Status().to_dict())
    with pytest.raises(TypeError):
        run.write_status("running", "", stepz=41)   # a misspelt field is refused, not written
    (tmp_path / "status.json").write_text("[1, 2]")
    assert run.read_status() == Status()


def _two_step_run(run_path) -> RunDir:
    """A real two-step CLI run as a user types it: preset auto, learning rates and z_dim left to their defaults."""
    from core import train
    assert train.main(["--steps", "2", "--batch-size", "16", "--device", "cpu", "--quality-every", "0",
                       "--run-dir", str(run_path)]) == 0
    return RunDir(str(run_path))


def test_config_json_is_the_resolved_config_the_checkpoint_and_generator_hold(tmp_path):
    from core import gans
    run = _two_step_run(tmp_path / "run")
    config = run.read_config()
    assert config.preset != "auto" and config.preset == run.read_status().preset
    assert None not in config.to_dict().values()
    assert config.lr_g == {**gans.get(config.gan).defaults, **gans.get(config.gan).fast_defaults}["lr_g"]
    generator = json.loads((tmp_path / "run" / "generator.json").read_text())
    checkpoint = torch.load(run.file("checkpoint.pt"), weights_only=False)
    assert config.to_dict() == generator["config"] == checkpoint["config"] and generator["preset"] == config.preset


def test_cli_and_page_refuse_a_changed_config_with_the_same_message(tmp_path):
    from core import train
    from core.resume import ResumeRefused, prepare_resume
    run = _two_step_run(tmp_path / "runs" / "run")
    cli = run_cli(["-m", "core.train", "--resume", run.path, "--lr-g", "0.0005"], timeout=120)
    with pytest.raises(ResumeRefused) as page:   # the page's road: the same policy, another caller
        prepare_resume(run, None, {"lr_g": 0.0005}, lambda requested: run.read_plan().device)
    assert "config changed in lr_g" in str(page.value) and "only steps may change" in str(page.value)
    assert cli.returncode == 2 and cli.stderr.strip() == f"error: {page.value}"
    assert run.read_status().step == 2                      # nothing trained
    # The run's own settings as first typed ('auto', defaults left empty) are no change: it continues.
    assert train.main(["--resume", run.path, "--preset", "auto", "--device", "cpu", "--steps", "4"]) == 0
    logged = [e["step"] for e in run.read_events()[0]]
    assert run.read_status().step == 4 and logged == sorted(set(logged)) and logged[-1] == 4   # one curve


def _reaped_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_checkpoint_write_killed_half_way_leaves_nothing_once_resumed_or_the_app_restarts(tmp_path):
    """write_atomic writes NAME.tmpPID, then renames it: a writer killed in between leaves the temp
    file. Resuming the run (the CLI's or the page's road) removes it; so does the next app start."""
    from app.job import Job
    from core import train
    runs = tmp_path / "runs"
    first, second = _two_step_run(runs / "a"), _two_step_run(runs / "b")
    dead = _reaped_pid()
    for run in (first, second):
        (runs / run.name / f"checkpoint.pt.tmp{dead}").write_bytes(b"half a checkpoint")
    live = runs / "b" / f"checkpoint.pt.tmp{os.getpid()}"     # a writer still at work: left alone
    live.write_bytes(b"being written")
    assert train.main(["--resume", first.path, "--steps", "3"]) == 0
    assert not [n for n in os.listdir(first.path) if ".tmp" in n]
    Job(runs_root=str(runs))
    assert [n for n in os.listdir(second.path) if ".tmp" in n] == [live.name]


def test_a_run_an_older_blink_saved_is_refused_in_words_and_keeps_its_generator(tmp_path):
    run = _two_step_run(tmp_path / "old")
    with open(run.file("config.json"), "w") as f:   # what an older Blink kept: the config as typed
        f.write(TrainConfig(steps=2, batch_size=16, device="cpu", quality_every=0).to_json())
    refused = run_cli(["-m", "core.train", "--resume", run.path, "--steps", "4"], timeout=120)
    assert refused.returncode == 2 and "saved by an older Blink" in refused.stderr, refused.stderr
    assert run.read_status().step == 2 and os.path.exists(run.file("generator.safetensors"))


def test_cli_help_lists_every_config_field():
    out = subprocess.run([sys.executable, "-m", "core.train", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    for name in TrainConfig.__dataclass_fields__:
        assert f"--{name.replace('_', '-')}" in out


def test_cli_flags_take_their_fields_types_even_when_the_default_is_none():
    from core.train import _parser
    args = _parser().parse_args(["--n-critic", "2", "--z-dim", "16", "--lr-g", "1e-3"])
    assert (args.n_critic, args.z_dim, args.lr_g) == (2, 16, 1e-3)
    assert type(args.n_critic) is int and type(args.z_dim) is int     # range(n_critic) needs an int
    config = TrainConfig(n_critic=args.n_critic, z_dim=args.z_dim).resolved("fast")
    assert (config.n_critic, config.z_dim) == (2, 16)
    assert TrainConfig().resolved("fast").z_dim == 16 and validate(TrainConfig().resolved()).z_dim == 100


def test_cli_refuses_a_bad_config_before_training(tmp_path):
    result = subprocess.run([sys.executable, "-m", "core.train", "--batch-size", "0", "--run-dir", str(tmp_path / "r")],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "batch_size must be" in result.stderr
    assert not (tmp_path / "r").exists()


def test_cli_help_the_page_and_validate_hold_each_fields_declared_choices_and_limits(tmp_path):
    """Choices and ranges are declared once, on the TrainConfig fields: --help lists them, and
    validate, the page's number checks and its query-string presets keep the same limits."""
    from dataclasses import fields
    from app.train_form import CHOICE_FIELDS, setup_from_query
    from core.config import form_number, spec
    # Wide enough that argparse does not wrap a help text (it breaks "wgan-gp" at the hyphen); one
    # entry per flag, its help after the flag's name on the same line or the next.
    help_text = subprocess.run([sys.executable, "-m", "core.train", "--help"], cwd=ROOT, capture_output=True,
                               text=True, check=True, env={**os.environ, "COLUMNS": "500"}).stdout
    flag_help = [" ".join(entry.split()) for entry in help_text.split("\n  --")]
    declared = {f.name: f.metadata for f in fields(TrainConfig)}
    choice_fields = [name for name, meta in declared.items() if meta["choices"]]
    assert {"dataset", "gan", "preset", "precision", "device"} <= set(choice_fields)
    for name, meta in declared.items():
        line = next(entry for entry in flag_help if entry.startswith(f"{name.replace('_', '-')} "))
        if meta["choices"]:
            assert "one of: " + ", ".join(meta["choices"]) in line
            with pytest.raises(ConfigError, match=re.escape(f"'nonsense' is not supported; choose one of: "
                                                            f"{', '.join(meta['choices'])}")):
                validate(TrainConfig(**{name: "nonsense"}).resolved())
        if meta["range"]:
            low, high = meta["range"]
            assert (f"{low:,} to {high:,}" if high is not None else f"at least {low:,}") in line
            validate(TrainConfig(**{name: low}).resolved())
            with pytest.raises(ConfigError, match=name):
                validate(TrainConfig(**{name: low - 1}).resolved())
            if high is not None:
                validate(TrainConfig(**{name: high}).resolved())
                with pytest.raises(ConfigError, match=f"{name} must be between {low:,} and {high:,}"):
                    validate(TrainConfig(**{name: high + 1}).resolved())
    for name in ("batch_size", "steps", "log_every", "grid_every", "checkpoint_every"):   # the page's boxes
        low, high = spec(name)["range"]
        assert form_number(str(high), name) == high
        with pytest.raises(ConfigError, match=re.escape(f"{spec(name)['label']} must be between {low:,} and {high:,}")):
            form_number(str(high + 1), name)
    for name, choices in CHOICE_FIELDS.items():                  # "Share this setup" links
        assert choices == spec(name)["choices"]
        assert all(setup_from_query({name: choice}) == ({name: choice}, []) for choice in choices)
    for name in ("batch_size", "steps"):
        high = spec(name)["range"][1]
        assert setup_from_query({name: str(high)}) == ({name: high}, [])
        values, notes = setup_from_query({name: str(high + 1)})
        assert values == {} and f"must be between 1 and {high:,}" in notes[0]
    # The CLI refuses past a limit with validate's message, before it writes anything.
    high = spec("log_every")["range"][1]
    result = subprocess.run([sys.executable, "-m", "core.train", "--log-every", str(high + 1),
                             "--run-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and f"log_every must be between 1 and {high:,}" in result.stderr
    assert not (tmp_path / "r").exists()


def test_cli_trains_then_sample_cli_writes_images(tmp_path):
    run_path = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "core.train", "--steps", "30", "--batch-size", "32", "--log-every", "10",
                    "--grid-every", "15", "--device", "cpu", "--run-dir", str(run_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    status = json.loads((run_path / "status.json").read_text())
    assert status["state"] == "done" and status["step"] == 30
    events = [json.loads(line) for line in (run_path / "events.jsonl").read_text().splitlines()]
    events = [e for e in events if "loss_d" in e]     # quality measurements are events of their own
    assert [e["step"] for e in events] == [1, 10, 20, 30]
    assert all(np.isfinite(e["loss_d"]) and np.isfinite(e["loss_g"]) for e in events)
    # Early grids every 10 steps (the picture changes fastest then), and every --grid-every.
    assert [step for step, _ in RunDir(str(run_path)).grids()] == [1, 10, 15, 20, 30]
    # Bundled MNIST has labels, so the default run is class-conditional: one grid column per digit.
    assert status["classes"] == 10
    assert json.loads((run_path / "generator.json").read_text())["spec"]["classes"] == 10
    from PIL import Image
    with Image.open(run_path / "grids" / "step_000030.png") as grid:
        assert grid.size == (10 * 30 + 2, 6 * 30 + 2)
    # The live chart's dotted lines are D's frames on those grids: at each grid's step, the mean of
    # D's verdicts on its real images and on its fakes, named as such beside D(x) and D(G(z)).
    from app.job import Job
    from app.live import LiveFeed
    feed = LiveFeed(Job(str(tmp_path)))
    feed.refresh()
    shown = json.loads(feed.current.full[len(b"data: "):])
    assert list(shown["labels"]["extra"]) == ["d_real", "d_fake", "frames_real", "frames_fake"]
    for kind in ("real", "fake"):
        frames = [(step, np.mean(RunDir(str(run_path)).read_verdicts(step)[kind])) for step in (1, 10, 15, 20, 30)]
        drawn = shown["points"][f"frames_{kind}"]
        assert [step for step, _ in drawn] == [step for step, _ in frames]
        assert all(abs(value - mean) < 1e-5 for (_, value), (_, mean) in zip(drawn, frames)), (drawn, frames)
    out = tmp_path / "samples.npy"
    subprocess.run([sys.executable, "-m", "core.sample", "--run", str(run_path), "--n", "5", "--seed", "7",
                    "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=120)
    images = np.load(out)
    assert images.shape == (5, 1, 28, 28) and images.dtype == np.float32
    assert images.min() >= -1 and images.max() <= 1 and images.std() > 0.01


# ---- the trainer's rules on logged values, without a Loop --------------------------------------
def test_a_failure_says_its_first_line_and_blames_memory_only_for_memory():
    from core.failures import describe, ended_by_signal, hint_for, oom_kills
    error = RuntimeError("Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error.\n"
                         "  Ran out of memory in memory space hbm.\n  (a long dump follows)")
    assert describe(error) == "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error."
    # What every viewer reads names no machine's paths: a library's build path goes, a file keeps its name.
    lost = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                        "[127.0.0.1]:29500")
    assert describe(lost) == "RuntimeError: Connection closed by peer [127.0.0.1]:29500"
    assert describe(FileNotFoundError("No such file: '/srv/blink/runs/x/grids/step_000100.png'")) == \
        "FileNotFoundError: No such file: 'step_000100.png'"
    worker = "DataLoader worker (pid 4242) is killed by signal: Segmentation fault."
    assert hint_for(worker) == ""                     # a crash, not memory
    crashed = ended_by_signal("SIGSEGV", oom_kills())
    assert crashed == "it crashed on SIGSEGV" and hint_for(crashed) == ""
    counted = oom_kills()
    if counted is not None:   # /proc/vmstat counts the kernel's out-of-memory kills
        assert "not for memory" in ended_by_signal("SIGKILL", counted)
        assert "out of memory" in ended_by_signal("SIGKILL", counted - 1) and "batch" in hint_for(
            ended_by_signal("SIGKILL", counted - 1))
    assert "smaller batch" in ended_by_signal("SIGKILL", None)   # cannot tell: says memory may be why


def test_a_final_checkpoint_that_fails_is_reported_and_the_last_good_one_kept(tmp_path):
    run = tmp_path / "run"
    done = run_cli([os.path.join(ROOT, "tests", "fault_scripts", "final_checkpoint_failure.py"),
                    "--device", "cpu", "--preset", "fast", "--batch-size", "16", "--steps", "6",
                    "--checkpoint-every", "3", "--quality-every", "0", "--run-dir", str(run)], timeout=120)
    status = RunDir(str(run)).read_status()
    assert done.returncode == 1 and status.state == "failed", (done.stdout, done.stderr)
    assert "while saving the checkpoint at step 6" in status.message and "No space left" in status.message
    assert "The last checkpoint (step 3) is kept" in status.message and status.saved_step == 3
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 3


def test_divergence_message_names_the_values_what_is_kept_and_what_to_change():
    from core.failures import divergence_message
    assert divergence_message({"loss_d": 0.7, "loss_g": 1.2}, 15, 10, "fp32") is None
    message = divergence_message({"loss_d": 0.7, "loss_g": float("nan"), "d_fake": float("inf")}, 15, 10, "fp16")
    assert "diverged at step 15: loss_g, d_fake became NaN or infinite" in message
    assert "last good checkpoint (step 10) is kept" in message and "train in fp32 or bf16" in message
    message = divergence_message({"loss_d": float("nan")}, 3, 0, "fp32")
    assert "No checkpoint had been saved yet" in message and "fp16" not in message


def test_gan_step_updates_d_n_critic_times_then_g_with_d_frozen():
    """The one production step on the real models and losses, with no Loop around it."""
    from core import data, devices, gans, losses, runtime
    from core.step import GanStep
    torch.manual_seed(0)
    G, D = build(gans.get("wgan-gp"), "fast", 1, 28, 16)
    opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
    step = GanStep(G, D, opt_g, opt_d, losses.make_loss(gans.get("wgan-gp")), runtime.Runtime(devices.probe("cpu")),
                   n_critic=3, z_dim=16)
    stream = data.BatchStream(data.load("bundled-mnist").images, 8, torch.device("cpu"), seed=0)
    d_grads = []   # D's gradients as each optimizer step sees them
    opt_d.register_step_post_hook(lambda *_: d_grads.append([p.grad.clone() for p in D.parameters()]))
    opt_g.register_step_post_hook(lambda *_: d_grads.append([p.grad for p in D.parameters()]))
    values = step(stream)
    assert len(d_grads) == 4                                    # 3 critic updates, then G's
    # G's update added nothing to D's gradients (D frozen): they are still the last critic step's.
    assert all(torch.equal(a, b) for a, b in zip(d_grads[2], d_grads[3]))
    assert all(p.requires_grad for p in D.parameters())         # unfrozen for the next critic step
    assert set(values) == {"loss_d", "loss_g", "wasserstein", "gp"}
    assert all(isinstance(v, torch.Tensor) and not v.requires_grad for v in values.values())


# ---- the trainer's two seams: its progress report and its control, without a Loop ------------
def test_speed_leaves_compile_seconds_out_and_the_eta_follows_from_it():
    from core.report import Steady, seconds_left, steps_per_second
    steady = Steady(time=10.0, step=2, compile_seconds=5.0)
    assert steps_per_second(None, 40, 30.0, 9.0) is None           # not steady yet: no speed to show
    assert steps_per_second(steady, 2, 30.0, 9.0) is None          # no step since the steady base
    # 40 steps in 20 s, 4 s of which compiled the grid's or the meter's graph.
    speed = steps_per_second(steady, 42, 30.0, 9.0)
    assert speed == (42 - 2) / ((30.0 - 10.0) - (9.0 - 5.0))
    assert seconds_left(100, 42, speed) == (100 - 42) / speed
    assert seconds_left(100, 42, None) is None


def test_device_memory_is_read_at_the_first_step_and_about_every_hundred():
    from core.report import MEMORY_EVERY_STEPS, memory_due
    log_every = 25
    due = [step for step in range(0, 4 * MEMORY_EVERY_STEPS + 1, log_every) if memory_due(step, log_every)]
    assert due == [0, MEMORY_EVERY_STEPS, 2 * MEMORY_EVERY_STEPS, 3 * MEMORY_EVERY_STEPS, 4 * MEMORY_EVERY_STEPS]
    assert memory_due(1, log_every)
    # Logging less often than that: each log step reads it.
    assert all(memory_due(step, 3 * MEMORY_EVERY_STEPS) for step in range(0, 10 * MEMORY_EVERY_STEPS, 300))


def test_reporter_writes_the_status_with_no_speed_until_a_step_after_the_steady_one(tmp_path):
    from core import devices
    from core.report import Reporter
    from core.plan import plan_run
    from core.training import build_training
    training = build_training(plan_run(TrainConfig(steps=100), devices.probe("cpu")))
    config = training.config
    run = RunDir(str(tmp_path))
    report = Reporter(run, training, trainer_pid=os.getpid())
    report.elapsed_before = 50.0        # a resumed run's earlier sessions
    report.start()
    speeds = []
    for step in (1, 2, 3):
        report.stepped(step)
        report.write("running", "Training...", step, 0, "", 0.0)
        speeds.append(run.read_status().steps_per_second)
    assert speeds[:2] == [None, None] and speeds[2] > 0    # on a CPU the steps are steady from step 2
    status = run.read_status()
    assert (status.state, status.step, status.steps, status.pid, status.devices) == ("running", 3, 100, os.getpid(), 1)
    assert status.images_per_second == pytest.approx(status.steps_per_second * config.batch_size * config.n_critic,
                                                     rel=1e-3)
    # The plan's facts and the setup's measures, as the plan and the Training hold them.
    assert status.elapsed >= 50.0 and status.classes == 10 and status.preset_reason == training.plan.preset_reason
    assert status.preset_reason.startswith("auto: ") and status.resolution == 28
    assert status.diagnostics["data_load_seconds"] == round(training.data_load_seconds, 2) > 0
    assert status.diagnostics["unreadable_images_skipped"] == 0
    report.paused(3600.0)                                   # an hour paused is not training time
    assert report.elapsed() < 50.0


def test_control_hears_requests_and_the_app_gone_and_ends_a_pause_on_resume_or_stop(tmp_path):
    from core.control import Control
    run = RunDir(str(tmp_path))
    assert not Control(run).request_waiting() and Control(run).decision() == "run"
    run.request("pause")
    assert Control(run).request_waiting()               # the current step becomes a log step
    assert Control(run).decision() == "pause"
    run.request("resume")
    assert Control(run).wait_while_paused() == "run" and run.read_request() == ""   # resumed, request cleared
    run.request("stop")
    assert Control(run).wait_while_paused() == "stop" and Control(run).decision() == "stop"
    app = subprocess.Popen(["true"])
    app.wait()
    assert Control(run, watch_pids=[app.pid]).decision() == "gone"
