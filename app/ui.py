"""The Blink page: Train tab (form, live status, plots, sample grid) and Sample tab.

Every viewer's page polls the one shared job with a gr.Timer; a tick returns gr.skip() when
nothing changed, so a room of viewers costs a file stat each per second. Named endpoints
(start, stop, status, sample, interpolate) let gradio_client drive the app.
"""
from __future__ import annotations

import threading

import gradio as gr

from app import sample_tab, views
from app.job import Job, JobBusy
from core import devices
from core.config import DATASETS, DEVICES, GANS, PRECISIONS, PRESETS, ConfigError, TrainConfig, validate

POLL_SECONDS = 1.0
GAN_LABELS = {"dcgan": "DCGAN (non-saturating)", "wgan-gp": "WGAN-GP", "hinge": "Hinge + spectral norm (SNGAN)"}
DATASET_LABELS = {"bundled-mnist": "MNIST (bundled, offline)", "mnist": "MNIST (full, torchvision)",
                  "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "celeba": "CelebA 64x64",
                  "folder": "My images (folder or zip)"}


class DeviceCache:
    """Device probes, run in a child process (the UI never imports torch_xla) and kept."""

    def __init__(self):
        self._infos: dict[str, devices.DeviceInfo] = {}
        self._lock = threading.Lock()

    def get(self, requested: str = "auto") -> devices.DeviceInfo:
        with self._lock:
            if requested not in self._infos:
                self._infos[requested] = devices.probe_in_subprocess(requested)
            return self._infos[requested]


def precision_choices(info: devices.DeviceInfo) -> list[tuple[str, str]]:
    """Radio choices that say which precisions this device cannot run, and why."""
    choices = []
    for precision in PRECISIONS:
        reason = info.precision_refused.get(precision)
        label = precision if not reason else f"{precision} (not on {info.kind}: {reason.split(';')[0].split('.')[0]})"
        choices.append((label, precision))
    return choices


def dataset_size(dataset: str, data_path: str) -> int | None:
    """Size for validation, if it can be known cheaply (None: checked again by the trainer)."""
    from core import data
    info_fn = getattr(data, "dataset_info", None)
    if info_fn is not None:
        info = info_fn(dataset, data_path)
        if not info.get("available", True):
            raise ConfigError(info.get("message") or f"Dataset {dataset} is not available.")
        return info.get("size")
    return 10_000 if dataset == "bundled-mnist" else None


def build_app(job: Job | None = None, device_cache: DeviceCache | None = None) -> gr.Blocks:
    job = job or Job()
    device_cache = device_cache or DeviceCache()
    info = device_cache.get("auto")

    def config_from_form(dataset, data_path, gan, preset, batch_size, precision, device, steps) -> TrainConfig:
        try:
            config = TrainConfig(dataset=dataset, data_path=data_path or "", gan=gan, preset=preset,
                                 batch_size=int(batch_size), precision=precision, device=device, steps=int(steps))
        except (TypeError, ValueError) as exc:
            raise gr.Error(f"Invalid form value: {exc}")
        try:
            chosen = device_cache.get(device)
            validate(config, dataset_size=dataset_size(dataset, config.data_path), device_caps=chosen.to_dict())
        except ConfigError as exc:
            raise gr.Error(str(exc), title="Check the settings")
        return config

    def start(dataset, data_path, gan, preset, batch_size, precision, device, steps):
        config = config_from_form(dataset, data_path, gan, preset, batch_size, precision, device, steps)
        try:
            run = job.start(config)
        except JobBusy as exc:
            raise gr.Error(str(exc), title="A run is going")
        return f"Started run `{run.name}`.", gr.Timer(active=True)

    def stop():
        return job.request("stop")

    def status_api() -> dict:
        """The run as plain JSON for scripts: status, event count, newest event and grid."""
        snap = job.snapshot()
        return {"run": snap.run_name, **snap.status, "events": len(snap.events),
                "last_event": snap.events[-1] if snap.events else None, "grid": snap.grid_path}

    def poll(seen: dict):
        """One timer tick: skip everything when nothing changed since this viewer's last tick."""
        snap = job.snapshot()
        if snap.version and snap.version == seen.get("version"):
            return (gr.skip(),) * 7 + (seen,)
        state = snap.status.get("state", "")
        gan = snap.status.get("gan", "dcgan")
        switch = (state in ("done", "stopped") and seen.get("run") == snap.run_name
                  and seen.get("state") not in ("done", "stopped", None, ""))
        tabs = gr.Tabs(selected="sample") if switch else gr.skip()
        new_seen = {"version": snap.version, "run": snap.run_name, "state": state}
        return (views.status_line(snap.status, snap.run_name), views.loss_table(snap.events),
                views.extra_table(snap.events, gan), views.quality_table(snap.events), snap.grid_path,
                views.diagnostics_table(snap.status), tabs, new_seen)

    with gr.Blocks(title="Blink: watch a GAN learn", delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# Blink\nPick a dataset, press **Start**, and watch a GAN learn. "
                    f"Device: **{info.name}**" + (f" — {info.notice}" if info.notice else ""))
        seen = gr.State({})
        timer = gr.Timer(POLL_SECONDS, active=True)
        with gr.Tabs(selected="train") as tabs:
            with gr.Tab("Train", id="train"):
                with gr.Row():
                    dataset = gr.Dropdown([(DATASET_LABELS[d], d) for d in DATASETS], value="bundled-mnist",
                                          label="Dataset")
                    data_path = gr.Textbox(label="Image folder or zip (for 'My images')", value="")
                    gan = gr.Dropdown([(GAN_LABELS[g], g) for g in GANS], value="dcgan", label="GAN type")
                    preset = gr.Dropdown(list(PRESETS), value="auto", label="Model size",
                                         info="auto: the seed's 64x64 DCGAN on TPU/GPU, a fast native-size one on CPU")
                with gr.Row():
                    batch_size = gr.Number(value=TrainConfig.batch_size, precision=0, label="Batch size", minimum=1)
                    precision = gr.Radio(precision_choices(info), value="fp32", label="Precision")
                    device = gr.Dropdown(list(DEVICES), value="auto", label="Device")
                    steps = gr.Number(value=TrainConfig.steps, precision=0, label="Training length (steps)",
                                      minimum=1)
                with gr.Row():
                    start_button = gr.Button("Start", variant="primary")
                    stop_button = gr.Button("Stop", variant="stop")
                message = gr.Markdown()
                status = gr.Markdown(views.status_line({}), label="Status", elem_id="status")
                with gr.Row():
                    with gr.Column(scale=3):
                        loss_plot = gr.LinePlot(x="step", y="value", color="series", label="Losses",
                                                elem_id="loss-plot")
                        extra_plot = gr.LinePlot(x="step", y="value", color="series", label="Discriminator view")
                        quality_plot = gr.LinePlot(x="step", y="value", color="series", label="Quality")
                    with gr.Column(scale=2):
                        grid = gr.Image(label="Samples from fixed noise", format="png", type="filepath",
                                        interactive=False, elem_id="sample-grid")
                with gr.Accordion("Diagnostics", open=False):
                    diagnostics = gr.Dataframe(headers=["what", "value"], interactive=False)
            with gr.Tab("Sample", id="sample"):
                sample_tab.build(job.generator_dir)

        form = [dataset, data_path, gan, preset, batch_size, precision, device, steps]
        start_button.click(start, form, [message, timer], api_name="start")
        stop_button.click(stop, None, message, api_name="stop", concurrency_limit=None)
        timer.tick(poll, seen, [status, loss_plot, extra_plot, quality_plot, grid, diagnostics, tabs, seen],
                   api_name="poll", concurrency_limit=None, show_progress="hidden")
        gr.api(status_api, api_name="status", concurrency_limit=None)
    demo.blink_job = job    # tests and app.py reach the job through the app
    return demo

