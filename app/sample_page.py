"""The Sample tab's page: its components, laid out where the tab is made, and its events, each
wired to a handler of app/sample_tab.py's SampleTab (whose base class SamplePage is). The limits
here bound both the page's widgets and the handlers' own checks of what a script sends."""
from __future__ import annotations

import contextlib

import gradio as gr

from app import viewer_work
from app.sample_work import N_DIRECTIONS

MAX_GRID = 256
MAX_STRIP = 32
MAX_NEIGHBOURS = 16
DIRECTION_RANGE = 5.0      # slider range in standard deviations of z along a direction
FOLLOW, SHIPPED = "follow", "shipped"   # a viewer's choice of generator, besides a run's name
SHIPPED_CHOICE = ("The shipped generator (pre-trained)", SHIPPED)
SEED_CLASS = "seed"        # a class picker's "no class chosen": the seed decides (seed mod the class count)
# Sized for a projector (issue 27): each image as wide as its block, as tall as the live grid when
# presenting (72vh: app/static/live.js fitGrid), pixelated; the label above it, not over a strip.
SAMPLE_CSS = """
.block.sample-output { padding: 0; border-width: 0; }
.block.sample-output > label[data-testid="block-label"] { position: static; }
.block.sample-output .image-container { height: auto; }
.block.sample-output .image-frame { width: 100%; height: auto; }
.block.sample-output .image-frame img { width: 100%; height: auto; max-height: 72vh; object-fit: contain;
  image-rendering: pixelated; }
@media (max-width: 640px) { .block.sample-section { padding-left: 4px; padding-right: 4px; } }
"""
# Gradio's slider reads a typed number on blur only: Enter blurs, so what follows the slider follows it.
ENTER_SETS_SLIDER_JS = """
if (!window.blinkEnterSetsSlider) {
  window.blinkEnterSetsSlider = true;
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key === "Enter" && box.matches && box.matches(".sample-slider input[type=number]"))
      box.dispatchEvent(new FocusEvent("blur"));
  });
}
"""
# The events that make a file in the heavy lane share one concurrency group, larger than the lane,
# so that every request reaches the lane's bound and deadline (app/viewer_work.py).
FILE_EVENT = dict(concurrency_id="viewer-files", concurrency_limit=viewer_work.FILE_REQUESTS_AT_ONCE)
PRIVATE = dict(api_visibility="private")
ON_RELEASE = dict(api_visibility="private", trigger_mode="always_last")   # one run when the student lets go


@contextlib.contextmanager
def tab_blocks():
    """The page's Blocks when the tab is made inside the page's open Tab, else one of its own (a test
    makes a tab alone). Never a nested one: Gradio builds a whole server app for each Blocks made."""
    from gradio.context import Context
    if Context.root_block is not None:
        yield Context.root_block
    else:
        with gr.Blocks() as blocks:
            yield blocks


def _shown_image(label: str, elem_id: str, animated: bool = False):
    """An output image sized by SAMPLE_CSS; an animated one is served as its GIF file."""
    kind = dict(type="filepath") if animated else dict(format="png", type="numpy")
    return gr.Image(label=label, interactive=False, elem_id=elem_id, elem_classes=["sample-output"], **kind)


def _slider(low, high, value, step, label: str, **options):
    return gr.Slider(low, high, value=value, step=step, label=label, elem_classes=["sample-slider"], **options)


def _seed_box(label: str, value: int):
    return gr.Number(value=value, precision=None, label=label, minimum=0)


def _naming_generator(trigger, handler, inputs, outputs: list, **event) -> None:
    """trigger(handler), whose handler also returns which generator made its outputs; once it
    succeeded, each output's label names it. A step of its own: an output updated with a label
    reaches a script through the named API as a dict, not as the plain file or image it was."""
    made_by, labels = gr.State(""), [output.label for output in outputs]

    def name(who):
        updates = [gr.update(label=f"{label}. Generator: {who}") for label in labels]
        return updates if len(updates) > 1 else updates[0]
    trigger(handler, inputs, [*outputs, made_by], **event).success(name, made_by, outputs, show_progress="hidden",
                                                                   **PRIVATE)


class SamplePage:
    """Lays the tab out, its events calling SampleTab's handlers; the components those read or
    update become attributes."""

    def _lay_out(self) -> None:
        with tab_blocks():
            self.view = gr.State(FOLLOW)
            self._render_seeds()
            self._render_interpolation()
            self._render_directions()
            self._render_timelapse()
            self._render_generator_files()
            self.shown_outputs = [self.follow, self.pick, self.digit, self.class_a, self.class_b, self.grid,
                                  self.caption]
            # The viewer's choice goes last: a State is no parameter of the named API.
            self.pick.input(self.pick_generator, [self.pick, self.seed, self.count, self.digit, self.view],
                            [self.view, *self.shown_outputs], api_name="choose_generator")
            self.follow.input(self.follow_live_run, [self.follow, self.pick, self.seed, self.count, self.digit],
                              [self.view, *self.shown_outputs], api_name="follow_live_run")
            gr.HTML("", js_on_load=ENTER_SETS_SLIDER_JS, apply_default_css=False, container=False, padding=False)

    def show_on(self, triggers) -> None:
        """Refresh what depends on the viewer's generator on these events (page open, tab opened, run end)."""
        gr.on(triggers, self.shown, self.sample_inputs, self.shown_outputs, show_progress="hidden", **PRIVATE)

    def _render_seeds(self) -> None:
        with gr.Row():
            self.follow = gr.Checkbox(value=True, label="Follow the live run",
                                      info="its newest checkpoint each time you sample (the shipped generator until it has one)")
            # Custom values: the runs change after the page was built (the handlers accept only this server's).
            self.pick = gr.Dropdown([SHIPPED_CHOICE], value=None, allow_custom_value=True, label="Or pick a generator",
                                    info="runs on this server that saved one, newest first")
        with gr.Row():
            self.seed = _seed_box("Seed", 0)
            self.count = _slider(1, MAX_GRID, 64, 1, "Count")
            self.digit = gr.Dropdown([("Every class, one per column", SEED_CLASS)], value=SEED_CLASS,
                                     allow_custom_value=True, label="Class", info="of a class-conditional generator")
            sample_button = gr.Button("Sample", variant="primary")
            zip_button = gr.Button("Download samples (zip of PNGs)")
        self.caption = gr.Markdown(elem_id="sample-caption")
        self.grid = _shown_image("Samples", "sample-grid")
        samples_zip = gr.File(label="Samples (zip)", elem_id="sample-zip")

        self.sample_inputs = [self.view, self.seed, self.count, self.digit]
        sample_button.click(self.sample, self.sample_inputs, [self.grid, self.caption], api_name="sample")
        self.digit.input(self.sample, self.sample_inputs, [self.grid, self.caption], **PRIVATE)
        self.count.release(self.sample, self.sample_inputs, [self.grid, self.caption], **ON_RELEASE)
        _naming_generator(zip_button.click, self.download_samples, self.sample_inputs, [samples_zip],
                          api_name="download_samples", **FILE_EVENT)

    def _render_interpolation(self) -> None:
        with gr.Accordion("Interpolate between two seeds", open=True, elem_classes=["sample-section"]):
            with gr.Row():
                seed_a, seed_b = _seed_box("Seed A", 1), _seed_box("Seed B", 2)
                strip_steps = _slider(2, MAX_STRIP, 10, 1, "Steps")
                mode = gr.Radio(["linear", "spherical"], value="spherical", label="Interpolation")
                self.class_a, self.class_b = [
                    gr.Dropdown([("The seed's class", SEED_CLASS)], value=SEED_CLASS, allow_custom_value=True,
                                label=f"Class {end}", info="morph one class into another") for end in "AB"]
                interpolate_button = gr.Button("Interpolate")
                gif_button = gr.Button("Make GIF")
            strip = _shown_image("Interpolation", "sample-strip")
            with gr.Row():
                gif_preview = _shown_image("Interpolation (animated)", "sample-gif", animated=True)
                gif_file = gr.File(label="Interpolation GIF", elem_id="sample-gif-file")

        inputs = [self.view, seed_a, seed_b, strip_steps, mode, self.class_a, self.class_b]
        _naming_generator(interpolate_button.click, self.interpolate, inputs, [strip], api_name="interpolate")
        _naming_generator(strip_steps.release, self.interpolate, inputs, [strip], **ON_RELEASE)
        _naming_generator(gif_button.click, self.interpolation_gif, inputs, [gif_preview, gif_file],
                          api_name="interpolation_gif", **FILE_EVENT)

    def _render_directions(self) -> None:
        with gr.Accordion("Directions, truncation and nearest real images", open=True, elem_classes=["sample-section"]):
            gr.Markdown("Five directions found by PCA of the generator's first-layer features (GANSpace), "
                        "in standard deviations of the latent. Psi < 1 pulls the latent toward the mean: "
                        "more typical, less varied.")
            with gr.Row():
                explore_seed = _seed_box("Explore seed", 0)
                psi = _slider(0.0, 2.0, 1.0, 0.05, "Truncation psi")
                k = _slider(1, MAX_NEIGHBOURS, 6, 1, "Neighbours")
            sliders = [_slider(-DIRECTION_RANGE, DIRECTION_RANGE, 0.0, 0.1, f"Direction {i + 1}")
                       for i in range(N_DIRECTIONS)]
            with gr.Row():
                explore_button = gr.Button("Render")
                reset_button = gr.Button("Reset directions")
                neighbours_button = gr.Button("Nearest real images")
            # One below the other: beside the image, the wide neighbours' strip would be narrower than the live grid.
            explore_caption = gr.Markdown(elem_id="explore-caption")
            explored = _shown_image("Explored image", "sample-explored")
            neighbour_caption = gr.Markdown(elem_id="neighbour-caption")
            neighbour_strip = _shown_image("Nearest training images", "sample-neighbours")

        inputs, outputs = [self.view, explore_seed, psi, *sliders], [explored, explore_caption]
        explore_button.click(self.explore, inputs, outputs, api_name="explore")
        explore_seed.submit(self.explore, inputs, outputs, **PRIVATE)
        for slider in [psi, *sliders]:
            slider.release(self.explore, inputs, outputs, **ON_RELEASE)
        reset_button.click(lambda: [0.0] * N_DIRECTIONS, None, sliders, **PRIVATE).then(
            self.explore, inputs, outputs, **PRIVATE)
        neighbours_button.click(self.neighbours, [self.view, explore_seed, psi, k, *sliders],
                                [neighbour_strip, neighbour_caption], api_name="neighbours", **FILE_EVENT)

    def _render_timelapse(self) -> None:
        with gr.Accordion("Training timelapse", open=False, elem_classes=["sample-section"]):
            gr.Markdown("The run's fixed-noise grids, oldest to newest, playing as a loop (a GIF: its download "
                        "button keeps it; no MP4, that would need ffmpeg). The slider stops at one step.")
            timelapse_button = gr.Button("Load timelapse")
            self.timelapse_caption = gr.Markdown(elem_id="timelapse-caption")
            self.timelapse_gif = _shown_image("Timelapse (animated)", "sample-timelapse", animated=True)
            # Not interactive before the run's grids: until then its range means nothing.
            self.step_slider = _slider(0, 1, 1, 1, "Grid at step", interactive=False)
            self.step_grid = _shown_image("Grid at the chosen step", "sample-step-grid")

        timelapse_button.click(self.timelapse, self.view,
                               [self.timelapse_gif, self.step_slider, self.step_grid, self.timelapse_caption],
                               api_name="timelapse", **FILE_EVENT)
        self.step_slider.release(self.grid_at, [self.view, self.step_slider], [self.step_grid, self.timelapse_caption],
                                 api_name="grid_at", trigger_mode="always_last")

    def _render_generator_files(self) -> None:
        with gr.Accordion("Generator files", open=False, elem_classes=["sample-section"]):
            with gr.Row():
                download_button = gr.Button("Download generator")
                files = gr.File(label="Generator (safetensors + config JSON)", file_count="multiple",
                                elem_id="generator-files")
            with gr.Row():
                uploaded = gr.File(label="Upload a generator (generator.safetensors + generator.json)",
                                   file_count="multiple", file_types=[".safetensors", ".json"], type="filepath")
                upload_button = gr.Button("Use uploaded generator")
                back_button = gr.Button("Use the run's generator")
            generator_key = gr.Textbox(label="Host key (the generator is shared by everyone on this server)",
                                       type="password", value="", visible=self.host_key_set)
            upload_status = gr.Markdown()

        _naming_generator(download_button.click, self.download_generator, self.view, [files],
                          api_name="download_generator", **FILE_EVENT)
        upload_button.click(self.upload_generator, [uploaded, generator_key], upload_status, api_name="upload_generator")
        back_button.click(self.use_run_generator, generator_key, upload_status, api_name="use_run_generator")
