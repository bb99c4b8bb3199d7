"""The TPU path (PyTorch/XLA), proven on XLA:CPU (PJRT_DEVICE=CPU).

All XLA work runs in subprocesses: the XLA runtime cannot be re-initialised in-process, and
torch_xla.launch refuses a runtime that is already up. Every subprocess has a timeout: several
XLA:CPU devices meeting in a collective under launch hang instead of failing (pytorch/xla#5342),
and a hang must fail the test, not the CI job. Each XLA:CPU compile takes seconds on 2 cores,
so every run is tiny (preset fast at 28x28, batch 8-16, a handful of steps).

The fallback tests at the top need no torch_xla and run everywhere.
"""
from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time

import pytest

from tests.apphelpers import alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "xla_scripts")
XLA_TIMEOUT = 420   # seconds for one XLA subprocess: generous for a loaded 2-core CI machine


def _env(**extra: str) -> dict:
    """The child's environment: repo importable, XLA on the CPU, no inherited XLA knobs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CPU_NUM_DEVICES", "XLA_ALWAYS_ALLREDUCE", "BLINK_DISABLE_XLA", "PJRT_DEVICE")}
    env.update({"PYTHONPATH": ROOT, "PJRT_DEVICE": "CPU", **extra})
    return env


def _run(args: list[str], timeout: float = XLA_TIMEOUT, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    return proc


def _check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def _script(name: str, *args: str, **env: str) -> None:
    _check(_run([os.path.join(SCRIPTS, name), *map(str, args)], **env))


@functools.lru_cache(maxsize=None)
def _xla_import_error() -> str:
    """Why torch_xla cannot be imported here ('' if it can), asked in a child process so
    that pytest itself never imports it."""
    try:
        proc = _run(["-c", "from core import devices; print(devices.xla_import_error())"], timeout=120)
    except subprocess.TimeoutExpired:
        return "importing torch_xla timed out"
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else (
        "" if proc.returncode == 0 else proc.stderr.strip()[-200:])


@pytest.fixture(autouse=True)
def _needs_xla(request):
    if request.node.get_closest_marker("xla") and _xla_import_error():
        pytest.skip(_xla_import_error())


@pytest.fixture
def broken_xla(tmp_path) -> str:
    """A PYTHONPATH entry whose torch_xla fails to import the way a torch/torch_xla version
    mismatch does. A real import failure in a real child process, not a mock."""
    package = tmp_path / "broken_site" / "torch_xla"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("_XLAC.cpython-311-x86_64-linux-gnu.so: undefined symbol: '
        '_ZN5torch8autograd12VariableInfoC1ERKN2at6TensorE")\n')
    return f"{package.parent}{os.pathsep}{ROOT}"


def _probe(device: str, **env: str) -> dict:
    proc = _check(_run(["-m", "core.devices", "--device", device], timeout=180, **env))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _events(run_path: str) -> list[dict]:
    with open(os.path.join(run_path, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _status(run_path: str) -> dict:
    with open(os.path.join(run_path, "status.json")) as f:
        return json.load(f)


def _assert_finite_losses(events: list[dict]) -> None:
    losses = [e[k] for e in events for k in ("loss_d", "loss_g") if k in e]
    assert losses, "no losses were logged"
    assert all(isinstance(v, float) and math.isfinite(v) for v in losses), losses


# ------------------------------------------------------------------------------------------
# Fallback when torch_xla is missing or broken (no torch_xla needed)
# ------------------------------------------------------------------------------------------
def test_broken_torch_xla_falls_back_with_notice(broken_xla):
    for device in ("xla-cpu", "tpu"):
        info = _probe(device, PYTHONPATH=broken_xla)
        assert info["kind"] in ("cpu", "cuda")
        assert "undefined symbol" in info["notice"] or "no TPU" in info["notice"], info
        assert device.split("-")[0].upper() in info["notice"].upper()


def test_disabled_xla_trains_on_cpu_and_says_so(tmp_path):
    run = str(tmp_path / "run")
    _check(_run(["-m", "core.train", "--device", "xla-cpu", "--preset", "fast", "--batch-size", "8",
                 "--steps", "2", "--log-every", "1", "--run-dir", run], timeout=180, BLINK_DISABLE_XLA="1"))
    status = _status(run)
    assert status["state"] == "done"
    assert status["device_kind"] == "cpu"
    assert "BLINK_DISABLE_XLA" in status["notice"], "the user must see why XLA was not used"


def test_auto_probe_does_not_import_torch_xla_without_a_tpu():
    # The UI probes in a child; on a machine with no TPU even that child must not pay the
    # torch_xla import (seconds) nor touch the XLA runtime.
    code = ("import json, sys; from core import devices; i = devices.probe('auto'); "
            "print(json.dumps([i.kind, 'torch_xla' in sys.modules]))")
    kind, imported = json.loads(_check(_run(["-c", code], timeout=120)).stdout.strip().splitlines()[-1])
    if kind != "tpu":
        assert not imported


def test_bf16_refused_on_a_cpu_without_native_bf16(tmp_path):
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    native = "avx512_bf16" in flags or "amx_bf16" in flags
    run = str(tmp_path / "run")
    proc = _run(["-m", "core.train", "--device", "cpu", "--precision", "bf16", "--preset", "fast",
                 "--batch-size", "8", "--steps", "1", "--run-dir", run], timeout=180)
    status = _status(run)
    if native:
        assert proc.returncode == 0 and status["state"] == "done"
    else:
        assert proc.returncode != 0 and status["state"] == "failed"
        assert "bf16" in status["message"] and "native bfloat16" in status["message"]


# ------------------------------------------------------------------------------------------
# Precision policy on XLA
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
def test_fp16_refused_on_xla_with_the_reason(tmp_path):
    run = str(tmp_path / "run")
    proc = _run(["-m", "core.train", "--device", "xla-cpu", "--precision", "fp16", "--steps", "1",
                 "--run-dir", run], timeout=180)
    status = _status(run)
    assert proc.returncode != 0 and status["state"] == "failed"
    assert "fp16" in status["message"] and "bfloat16" in status["message"], status["message"]


@pytest.fixture(scope="module")
def autocast_dtypes(tmp_path_factory) -> dict:
    out = str(tmp_path_factory.mktemp("autocast") / "dtypes.json")
    _script("autocast_policy.py", out)
    with open(out) as f:
        return json.load(f)


@pytest.mark.xla
@pytest.mark.parametrize("gan", ["dcgan", "wgan-gp", "hinge"])
def test_autocast_bf16_policy_on_xla(autocast_dtypes, gan):
    """Convolutions in bf16; normalisation, generator output and every loss in fp32."""
    assert autocast_dtypes["kind"] == "xla-cpu"
    layers, values = autocast_dtypes["layers"][gan], autocast_dtypes["losses"][gan]
    convs = {k: v for k, v in layers.items() if "Conv" in k}
    norms = {k: v for k, v in layers.items() if "Norm" in k}
    assert convs and all(v == ["bfloat16"] for v in convs.values()), layers
    assert norms and all(v == ["float32"] for v in norms.values()), layers
    assert values["bn_running_mean"] == ["torch.float32"]
    assert all(v == "torch.float32" for k, v in values.items() if k != "bn_running_mean"), values


# ------------------------------------------------------------------------------------------
# The real trainer on XLA:CPU
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
def test_cli_training_on_xla_cpu_end_to_end(tmp_path, broken_xla):
    """bf16 (the TPU default) through the same CLI the app runs: compiling -> running -> done,
    finite losses, a grid, no fallback ops, and a checkpoint that loads without XLA."""
    run = str(tmp_path / "run")
    steps = 12
    cmd = [sys.executable, "-m", "core.train", "--device", "xla-cpu", "--precision", "bf16", "--preset", "fast",
           "--batch-size", "16", "--steps", str(steps), "--log-every", "2", "--grid-every", "6",
           "--run-dir", run]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    states: list[str] = []
    deadline = time.time() + XLA_TIMEOUT
    try:
        while proc.poll() is None and time.time() < deadline:
            try:
                state = _status(run).get("state")
            except (OSError, ValueError):
                state = None
            if state and (not states or states[-1] != state):
                states.append(state)
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        output = proc.communicate()[0]
    assert proc.returncode == 0, output[-3000:]

    status = _status(run)
    if status["state"] not in states:
        states.append(status["state"])
    # 'compiling' is shown while XLA builds the first graphs, then the run says 'running'.
    assert states[0] == "compiling" and states[-1] == "done", states
    assert "running" in states and states.index("running") > states.index("compiling"), states
    assert status["device_kind"] == "xla-cpu" and status["precision"] == "bf16"
    assert status["cores"] == 1          # XLA:CPU is never replicated (its collectives hang)
    diag = status["diagnostics"]
    assert isinstance(diag["compiles"], int) and diag["compiles"] > 0
    assert diag["fallback_ops"] == [], "ops outside devices.ALLOWED_FALLBACK_OPS ran on the host"
    assert diag["first_step_seconds"] and diag["first_step_seconds"] > 0
    assert "memory_used" not in diag     # XLA:CPU cannot report memory: polled, guarded, left out
    assert status["steps_per_second"] and status["steps_per_second"] > 0

    events = _events(run)
    assert events[-1]["step"] == steps
    _assert_finite_losses(events)
    grids = sorted(os.listdir(os.path.join(run, "grids")))
    assert grids and all(g.endswith(".png") for g in grids)
    with open(os.path.join(run, "grids", grids[-1]), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    # The checkpoint of the XLA run, on a machine where torch_xla cannot even be imported.
    check = (
        "import sys, torch\n"
        "from core.rundir import RunDir\n"
        "from core import models, sample\n"
        "state = RunDir(sys.argv[1]).load_checkpoint()\n"
        "tensors = [v for k in ('G', 'D') for v in state[k].values()]\n"
        "assert all(t.device.type == 'cpu' for t in tensors)\n"
        "G, meta = sample.load_run_generator(sys.argv[1])\n"
        "images = sample.generate(G, sample.latents(0, 4, G.z_dim))\n"
        "assert images.shape[0] == 4 and abs(images).max() <= 1.0 and images.std() > 0\n"
        "print(state['step'], meta['step'])\n")
    out = _check(_run(["-c", check, run], timeout=180, PYTHONPATH=broken_xla)).stdout.split()
    assert out == [str(steps), str(steps)]
    npy = str(tmp_path / "samples.npy")
    _check(_run(["-m", "core.sample", "--run", run, "--n", "4", "--out", npy], timeout=180, PYTHONPATH=broken_xla))
    assert os.path.getsize(npy) > 0


def _cli_run(tmp_path, *flags: str, **env: str) -> tuple[dict, list[dict]]:
    """The real CLI trainer on XLA:CPU (through devices.launch -> torch_xla.launch's worker)."""
    run = str(tmp_path / "run")
    _check(_run(["-m", "core.train", "--device", "xla-cpu", "--preset", "fast", "--run-dir", run, *flags], **env))
    return _status(run), _events(run)


@pytest.mark.xla
@pytest.mark.parametrize("gan, batch", [
    ("dcgan", 16),
    ("hinge", 16),   # spectral norm: torch.vdot is not lowered by XLA; ours must not fall back
    # Five critic updates (gradient penalty: double backward) per generator update, one graph.
    pytest.param("wgan-gp", 8, marks=pytest.mark.slow),
])
def test_real_trainer_compiles_once_and_never_falls_back(tmp_path, gan, batch):
    """Every graph a run has (first steps, steady step, log step, grid, quality meter, checkpoint)
    is met by step 10; steps 10-16 repeat them all and must compile nothing new."""
    status, events = _cli_run(tmp_path, "--gan", gan, "--batch-size", str(batch), "--steps", "16",
                              "--log-every", "2", "--grid-every", "4", "--quality-every", "4",
                              "--checkpoint-every", "4")
    assert status["state"] == "done" and status["device_kind"] == "xla-cpu", status
    assert status["worker_pid"] != status["pid"], "the replica did not run in a launch worker"
    compiles = {e["step"]: e["xla_compiles"] for e in events if "xla_compiles" in e}
    assert compiles[10] > 0 and compiles[16] == compiles[10], compiles
    assert [e["step"] for e in events if "quality_fd" in e] == [4, 8, 12, 16]   # the meter ran on XLA
    diag = status["diagnostics"]
    assert diag["fallback_ops"] == [], "ops outside devices.ALLOWED_FALLBACK_OPS ran on the host"
    assert diag["matmul_precision"] == "highest"    # fp32 means fp32 products (TPU's default is bf16)
    _assert_finite_losses(events)


@pytest.mark.xla
def test_control_agreement_adds_no_graph_execution(tmp_path):
    """With XLA_ALWAYS_ALLREDUCE=1 the stop/pause/failure flags are all-reduced every log step, in
    the step's own graph: between log steps with no grid, quality or checkpoint in between, the
    run executes exactly one graph per step."""
    status, events = _cli_run(tmp_path, "--batch-size", "16", "--steps", "9", "--log-every", "3",
                              "--grid-every", "1000", "--quality-every", "0", "--checkpoint-every", "1000",
                              XLA_ALWAYS_ALLREDUCE="1")
    assert status["state"] == "done", status
    assert status["diagnostics"]["all_reduces"] > 0, "the flags were not reduced across replicas in-graph"
    executions = {e["step"]: e["xla_executions"] for e in events if "xla_executions" in e}
    assert [executions[b] - executions[a] for a, b in ((3, 6), (6, 9))] == [3, 3], executions   # no early grid yet


@pytest.mark.xla
def test_failure_in_replica0_work_ends_every_replica_through_the_agreement(tmp_path):
    """Saving the grid raises from step 4 (a fault injected by the test script): the run ends
    `failed` at the next log step (6) through the agreed flags, the checkpoint of step 4 is kept,
    and the trainer and its worker exit."""
    run = str(tmp_path / "run")
    proc = _run([os.path.join(SCRIPTS, "replica0_failure.py"), "--device", "xla-cpu", "--preset", "fast",
                 "--batch-size", "16", "--steps", "300", "--log-every", "3", "--grid-every", "2",
                 "--checkpoint-every", "2", "--quality-every", "0", "--run-dir", run], XLA_ALWAYS_ALLREDUCE="1")
    status = _status(run)
    assert proc.returncode == 1 and status["state"] == "failed", (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "while saving the sample grid at step 4" in status["message"], status["message"]
    assert "simulated fault" in status["message"] and "checkpoint (step 4) is kept" in status["message"]
    assert status["step"] == 6 and status["saved_step"] == 4
    assert os.path.exists(os.path.join(run, "checkpoint.pt"))
    assert "saving the sample grid" in open(os.path.join(run, "error.log")).read()
    assert not alive(status["worker_pid"]) and status["worker_pid"] != status["pid"]


# ------------------------------------------------------------------------------------------
# Several devices, as far as XLA:CPU allows
# ------------------------------------------------------------------------------------------
@pytest.mark.xla
@pytest.mark.slow
def test_spmd_over_four_cpu_devices_trains_real_models(tmp_path):
    out = str(tmp_path / "spmd.json")
    _script("spmd_train.py", out, "wgan-gp", 3, 16, CPU_NUM_DEVICES="4")
    with open(out) as f:
        r = json.load(f)
    assert r["is_spmd"] and r["devices"] == 4
    assert "devices=[4,1,1,1]" in r["real_sharding"], r["real_sharding"]   # the batch is split 4 ways
    assert len(r["losses"]) == 3 and r["finite"], r["losses"]


@pytest.mark.xla
@pytest.mark.slow
def test_always_allreduce_trainer_pauses_and_stops_through_collectives(tmp_path):
    """One device with XLA_ALWAYS_ALLREDUCE=1 runs the multi-core code for real, in a launch
    worker: loss means and the pause/stop flags all-reduced in the log step's graph."""
    out, run = str(tmp_path / "ar.json"), str(tmp_path / "run")
    _script("allreduce_control.py", out, run, XLA_ALWAYS_ALLREDUCE="1")
    with open(out) as f:
        r = json.load(f)
    assert r["status"]["diagnostics"]["all_reduces"] > 0, "the collective was not lowered into the graph"
    assert r["status"]["worker_pid"] != r["status"]["pid"], "the replica did not run in a launch worker"
    assert r["state"] == "stopped" and r["status"]["state"] == "stopped"
    assert r["seen"]["paused_status_step"] is not None, "status never said 'paused'"
    assert r["seen"]["paused_at"] == r["seen"]["paused_status_step"], "steps ran while paused"
    assert 4 <= r["status"]["step"] < r["status"]["steps"]
    assert r["status"]["step"] == r["seen"]["paused_at"]      # it stopped where it paused
    _assert_finite_losses(r["events"])
    assert r["status"]["diagnostics"]["fallback_ops"] == []


@pytest.mark.xla
def test_launch_replicas_get_disjoint_data_and_different_noise(tmp_path):
    """torch_xla.launch over 2 CPU devices, no collectives: per-replica sharding and seeding."""
    _script("launch_shards.py", str(tmp_path), CPU_NUM_DEVICES="2")
    reports = []
    for rank in range(2):
        with open(tmp_path / f"rank{rank}.json") as f:
            reports.append(json.load(f))
    assert [r["rank"] for r in reports] == [0, 1] and all(r["world_size"] == 2 for r in reports)
    assert [r["is_master"] for r in reports] == [True, False]
    a, b = (set(r["seen"]) for r in reports)
    assert len(a) == len(reports[0]["seen"]) and len(b) == len(reports[1]["seen"]), "a shard repeated an image"
    assert a and b and not a & b, "replicas saw the same images"
    assert reports[0]["noise"] != reports[1]["noise"], "replicas drew identical noise"


# ------------------------------------------------------------------------------------------
# The probe tells the truth about a TPU (sysfs chips monkeypatched; torch_xla never imported)
# ------------------------------------------------------------------------------------------
@pytest.fixture
def tpu_host(monkeypatch):
    """A host whose PCI bus shows TPU chips: the chip ids are the only thing faked."""
    from core import devices

    def make(pci_ids: list[str], libtpu: bool, accelerator_type: str = ""):
        monkeypatch.setattr(devices, "tpu_pci_ids", lambda: list(pci_ids))
        monkeypatch.setattr(devices, "libtpu_found", lambda: libtpu)
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
        monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")    # no metadata server here: never ask one
        if accelerator_type:
            monkeypatch.setenv("TPU_ACCELERATOR_TYPE", accelerator_type)
        else:
            monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
        return devices
    return make


def test_probe_does_not_claim_a_tpu_without_libtpu(tpu_host):
    devices = tpu_host(["0x0063"] * 8, libtpu=False)
    info = devices.probe("auto")
    assert info.kind != "tpu", info
    assert "Found 8 TPU chip" in info.notice and "libtpu is not installed" in info.notice
    assert "torch_xla[tpu]" in info.notice
    assert devices.probe("tpu").kind != "tpu"
    assert "torch_xla" not in sys.modules     # refused before any import of torch_xla


def test_probe_does_not_claim_a_tpu_when_pjrt_device_says_cpu(tpu_host, monkeypatch):
    devices = tpu_host(["0x0063"] * 8, libtpu=True)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    info = devices.probe("auto")
    assert info.kind != "tpu" and "PJRT_DEVICE=CPU" in info.notice, info


@pytest.mark.parametrize("pci_ids, accelerator_type, name, replicas, processes", [
    (["0x0063"], "v5litepod-1", "TPU v5e (1 chip)", 1, 1),                    # Colab's free TPU
    (["0x0063"] * 8, "v5litepod-8", "TPU v5e (8 chips)", 8, 8),               # Kaggle v5e-8
    (["0x006f"] * 8, "", "TPU v6e (8 chips)", 8, 8),                          # Kaggle v6e-8, from PCI alone
    (["0x0027"] * 4, "v3-8", "TPU v3 (4 chips, 2 cores each)", 8, 4),         # v3-8: 4 processes x 2 threads
])
def test_todays_tpus_by_name(tpu_host, monkeypatch, pci_ids, accelerator_type, name, replicas, processes):
    devices = tpu_host(pci_ids, libtpu=True, accelerator_type=accelerator_type)
    monkeypatch.setattr(devices, "xla_import_error", lambda: "")   # torch_xla imports (not imported here)
    info = devices.probe("auto")
    assert (info.kind, info.name, info.cores, info.processes) == ("tpu", name, replicas, processes)
    assert devices.launches_workers(info) == (replicas > 1)   # one chip trains inline, no workers
    assert "fp16" in info.precision_refused and "highest" in info.precision_warned["fp32"]


def test_xla_cpu_on_a_tpu_host_means_the_cpu(monkeypatch):
    from core import devices
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    devices.prepare_environment("xla-cpu")
    assert os.environ["PJRT_DEVICE"] == "CPU" and os.environ["CPU_NUM_DEVICES"] == "1"


# ------------------------------------------------------------------------------------------
# The app's own process tree: python app.py -> trainer -> torch_xla.launch worker
# ------------------------------------------------------------------------------------------
XLA_FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="fast", batch_size=16, precision="fp32",
                device="xla-cpu", steps=12, log_every=2, grid_every=6, checkpoint_every=6)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture(scope="module")
def xla_app(tmp_path_factory):
    if _xla_import_error():
        pytest.skip(_xla_import_error())
    from tests.apphelpers import RunningApp
    app = RunningApp(str(tmp_path_factory.mktemp("xla-runs")), env={"OMP_NUM_THREADS": "1"}).wait_ready()
    app.seen_pids = set()
    yield app
    app.stop()


def _wait_status(client, predicate, timeout: float = XLA_TIMEOUT, what: str = "status") -> dict:
    from tests.apphelpers import wait_for

    def check():
        status = client.predict(api_name="/status")
        return status if predicate(status) else None
    return wait_for(check, timeout, what=what)


def _worker_of(client, app) -> tuple[int, int]:
    """(trainer pid, worker pid) of the running run, checked against the real process tree."""
    status = _wait_status(client, lambda s: s.get("worker_pid") and s.get("state") in ("compiling", "running"),
                          what="the launch worker to report")
    trainer, worker = status["pid"], status["worker_pid"]
    assert _parent(worker) == trainer and _parent(trainer) == app.process.pid, "not UI -> trainer -> worker"
    app.seen_pids.update((trainer, worker))
    return trainer, worker


def _wait_end(client, timeout: float = 120) -> dict:
    return _wait_status(client, lambda s: s["state"] in ("done", "failed", "stopped"), timeout, what="the run to end")


def _wait_exit(*pids: int) -> None:
    from tests.apphelpers import wait_for
    wait_for(lambda: not any(alive(p) for p in pids), 60, what="the trainer and its worker to exit")


def _start_long_run(client, app, min_step: int) -> tuple[int, int]:
    """Start a run that would outlast the test; (trainer, worker) once it trains past min_step."""
    client.predict(**{**XLA_FORM, "steps": 100000}, key="", api_name="/start")
    trainer, worker = _worker_of(client, app)
    _wait_status(client, lambda s: s["state"] == "running" and s["step"] >= min_step, what="training")
    return trainer, worker


@pytest.mark.xla
@pytest.mark.slow
def test_app_start_trains_xla_cpu_through_a_launch_worker(xla_app):
    client = xla_app.client()
    assert "Started run" in client.predict(**XLA_FORM, key="", api_name="/start")
    trainer, worker = _worker_of(client, xla_app)
    status = _wait_end(client, XLA_TIMEOUT)
    assert status["state"] == "done" and status["step"] == 12, status
    assert status["device"].startswith("XLA:CPU") and status["diagnostics"]["fallback_ops"] == []
    _wait_exit(trainer, worker)


@pytest.mark.xla
@pytest.mark.slow
def test_app_stop_mid_run_keeps_a_checkpoint(xla_app):
    client = xla_app.client()
    trainer, worker = _start_long_run(client, xla_app, min_step=4)
    assert "Stopping" in client.predict(key="", api_name="/stop")
    status = _wait_end(client)
    assert status["state"] == "stopped" and status["saved_step"] == status["step"] > 0, status
    assert os.path.exists(os.path.join(os.path.dirname(os.path.dirname(status["grid"])), "checkpoint.pt"))
    _wait_exit(trainer, worker)


@pytest.mark.xla
@pytest.mark.slow
def test_app_worker_killed_fails_plainly_and_a_new_start_works(xla_app):
    import signal
    from tests.apphelpers import wait_for
    client = xla_app.client()
    trainer, worker = _start_long_run(client, xla_app, min_step=2)
    os.kill(worker, signal.SIGKILL)
    status = _wait_end(client)
    assert status["state"] == "failed", status
    assert "worker process ended abruptly" in status["message"] and "Hint:" in status["message"], status["message"]
    _wait_exit(trainer)
    # The device is free again: a new Start trains.
    new_trainer, _ = _start_long_run(client, xla_app, min_step=2)
    assert new_trainer != trainer
    client.predict(key="", api_name="/stop")
    _wait_status(client, lambda s: s["state"] == "stopped", timeout=120, what="the new run to stop")
    assert xla_app.stop() is not None
    wait_for(lambda: not [p for p in xla_app.seen_pids if alive(p)], 60, what="every process to exit")


@pytest.mark.xla
def test_doctor_reports_the_launch_road_and_a_real_run():
    proc = _check(_run(["-m", "core.doctor", "--device", "xla-cpu", "--steps", "15"]))
    out = proc.stdout
    assert "Device: XLA:CPU" in out and "1 torch_xla.launch worker process" in out, out
    assert "Short run: done after 15 of 15 steps" in out and "stopped growing" in out, out
    assert "ops run on the host: none" in out and "img/s" in out, out


def test_doctor_on_the_cpu():
    proc = _check(_run(["-m", "core.doctor", "--device", "cpu", "--steps", "10"], timeout=180))
    assert "Device: CPU" in proc.stdout and "in the trainer process" in proc.stdout
    assert "Short run: done after 10 of 10 steps" in proc.stdout and "OK:" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------------------
# The CLI keeps what it trained when interrupted (Ctrl-C reaches the terminal's process group)
# ------------------------------------------------------------------------------------------
def _interrupt_cli(tmp_path, device: str, sig: int, **env: str) -> tuple[int, dict, str]:
    import signal
    run = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-m", "core.train", "--device", device, "--preset", "fast",
                             "--batch-size", "16", "--steps", "100000", "--log-every", "5", "--run-dir", run],
                            cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + XLA_TIMEOUT
        while time.time() < deadline and proc.poll() is None:
            try:
                if _status(run).get("state") == "running" and _status(run).get("step", 0) >= 10:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)     # as a terminal's Ctrl-C does: the whole foreground group
        else:
            proc.send_signal(sig)        # as `kill` or a supervisor does: the process alone
        output = proc.communicate(timeout=180)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, _status(run), output


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_cli_interrupted_stops_with_a_checkpoint(tmp_path, signal_name):
    import signal
    code, status, output = _interrupt_cli(tmp_path, "cpu", getattr(signal, signal_name))
    assert code == 0 and status["state"] == "stopped", (status, output[-2000:])
    assert status["saved_step"] == status["step"] >= 10
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt") and os.path.exists(tmp_path / "run" / "generator.json")


@pytest.mark.xla
def test_cli_ctrl_c_on_the_launch_road_stops_every_replica_with_a_checkpoint(tmp_path):
    import signal
    code, status, output = _interrupt_cli(tmp_path, "xla-cpu", signal.SIGINT)
    assert code == 0 and status["state"] == "stopped", (status, output[-2000:])
    assert status["worker_pid"] != status["pid"] and not alive(status["worker_pid"])
    assert status["saved_step"] == status["step"] >= 10
    assert os.path.exists(tmp_path / "run" / "checkpoint.pt")
