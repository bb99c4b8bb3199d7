"""The Train tab's server-side checks, called directly on a TrainTab over a real Job (no server).

What a browser or script sees of these goes through the app in tests/app/test_app.py; here each
handler's own rule is checked, with the project's own message (no Gradio widget stands in front)."""
import dataclasses
import re
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import numpy as np
import pytest
from PIL import Image
from starlette.requests import Request

from app.job import Job
from app.live import LiveFeed
from app.train_form import setup_from_query
from app.ui import DeviceCache, TrainTab
from core.config import DEVICES, TrainConfig, spec

HOST_KEY = "the-teachers-key"
FORM = dict(dataset="bundled-mnist", data_path="", gan="dcgan", preset="auto", batch_size=64, precision="fp32",
            device="cpu", steps=50)


@pytest.fixture(scope="module")
def tab(tmp_path_factory):
    job = Job(runs_root=str(tmp_path_factory.mktemp("runs")))
    yield TrainTab(job, LiveFeed(job), DeviceCache(), HOST_KEY)   # the real device probes, kept for the module
    job.shutdown()


def refusal(tab, **changes) -> str:
    with pytest.raises(gr.Error) as refused:
        tab.planned_start(**{**FORM, **changes})
    return refused.value.message


def a_request(query: str = "", host: str = "class.example:7860") -> gr.Request:
    return gr.Request(Request({"type": "http", "method": "GET", "path": "/", "query_string": query.encode(),
                               "headers": [(b"host", host.encode())]}))


def test_the_form_becomes_the_config_it_shows(tab):
    config = tab.planned_start(**FORM).asked
    assert isinstance(config, TrainConfig)
    assert (config.dataset, config.batch_size, config.steps, config.device) == ("bundled-mnist", 64, 50, "cpu")


def test_bad_numbers_are_refused_naming_the_field_and_its_range(tab):
    low, high = spec("batch_size")["range"]
    label = spec("batch_size")["label"]
    assert refusal(tab, steps=0) == f"{spec('steps')['label']} must be between 1 and 1,000,000 (got 0)."
    assert refusal(tab, batch_size=high * 5) == f"{label} must be between {low} and {high:,} (got {high * 5:,})."
    assert refusal(tab, steps=None).startswith(f"{spec('steps')['label']} is empty: type a whole number")
    assert refusal(tab, batch_size="lots").startswith(f"{label} must be a whole number")
    assert refusal(tab, seed=-1) == f"Seed must be between 0 and {2**31 - 1:,} (got -1)."
    assert tab.planned_start(**FORM, seed=12).config.seed == 12


def test_a_fraction_where_a_whole_number_is_meant_is_refused_not_rounded(tab):
    """The walk's "steps 2.5" and "seed 1.5": each box hands the value on as typed (a Number with
    precision=0 would round it to 2 first), and the form refuses it naming the field."""
    for name in ("batch_size", "steps", "log_every", "grid_every", "checkpoint_every", "seed"):
        assert getattr(tab, name).preprocess(2.5) == 2.5, name
    assert tab.resume_steps.preprocess(2.5) == 2.5
    assert refusal(tab, steps=tab.steps.preprocess(2.5)) == "Training length (steps) must be a whole number (got 2.5)."
    assert refusal(tab, seed=tab.seed.preprocess(1.5)) == "Seed must be a whole number (got 1.5)."
    assert tab.planned_start(**{**FORM, "steps": tab.steps.preprocess(40.0)}).config.steps == 40   # 40.0 is whole


def test_an_unknown_device_is_refused_with_the_choices(tab):
    assert refusal(tab, device="quantum") == f"Device 'quantum' is not supported; choose one of: {', '.join(DEVICES)}."


def _images(folder, count: int) -> str:
    folder.mkdir()
    for i in range(count):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
    return str(folder)


def test_my_images_outside_the_allowed_roots_are_refused_without_naming_the_path(tab, tmp_path, monkeypatch):
    monkeypatch.delenv("BLINK_DATA_ROOTS", raising=False)
    folder = _images(tmp_path / "elsewhere", 3)
    message = refusal(tab, dataset="folder", data_path=folder, batch_size=2)
    assert "outside the folders this server allows" in message and folder not in message


def test_a_batch_larger_than_my_images_starts_lowered_to_the_set_and_the_page_says_so(tab, tmp_path, monkeypatch):
    monkeypatch.setenv("BLINK_DATA_ROOTS", str(tmp_path))
    folder = _images(tmp_path / "mine", 3)
    # Start takes the form's batch; the run's plan lowers it, and says why.
    plan = tab.planned_start(**{**FORM, "dataset": "folder", "data_path": folder, "batch_size": 128})
    assert (plan.asked.batch_size, plan.config.batch_size) == (128, 3)
    note = tab.estimate(**{**FORM, "dataset": "folder", "data_path": folder, "batch_size": 128})
    assert "batch 3 (lowered from 128: the set has 3 images)" in note, note


def test_a_refused_start_says_what_kind_of_refusal_in_its_heading(tab):
    with pytest.raises(gr.Error) as refused:
        tab.planned_start(**{**FORM, "steps": 0})
    assert refused.value.title == "Check the settings"   # not Gradio's own "Error"


def test_refusals_name_fields_by_the_labels_the_page_shows():
    from app.train_form import in_page_words
    assert in_page_words("batch_size 6 does not split evenly over 4 devices (each gets batch / 4): use a multiple "
                         "of 4, e.g. 4 or 8.") == ("Batch size 6 does not split evenly over 4 devices (each gets "
                                                    "batch / 4): use a multiple of 4, e.g. 4 or 8.")
    assert in_page_words("checkpoint_every must be at least 1") == "Checkpoint every (steps) must be at least 1"


def test_a_wrong_host_key_is_refused_and_the_right_one_passes(tab):
    for wrong in ("", None, HOST_KEY.upper(), HOST_KEY + " "):
        with pytest.raises(gr.Error, match="enter the host key"):
            tab.require_host(wrong)
    assert tab.require_host(HOST_KEY) is None
    with pytest.raises(gr.Error, match="enter the host key"):   # Start asks for the key before the form
        tab.start(**FORM, key="guess")


def test_a_link_presets_the_form_it_names_and_notes_what_it_ignored(tab):
    updates = tab.load_setup(a_request("dataset=cifar10&batch_size=32&steps=1e9&gan=evil&__theme=dark"))
    assert {tab.dataset: "cifar10", tab.batch_size: 32}.items() <= updates.items()
    assert tab.steps not in updates and tab.gan not in updates      # the ignored ones keep the page's values
    note = updates[tab.setup_note]
    assert "dataset=cifar10" in note and "`steps=1e9` ignored" in note and "`gan=evil` ignored" in note
    assert tab.load_setup(a_request()) == {tab.setup_note: ""}


def test_the_share_link_points_at_this_page_and_reads_back_as_the_same_setup(tab):
    setup = dict(dataset="cifar10", gan="hinge", preset="fast", batch_size=32, precision="bf16", steps=500,
                 device="cpu")
    link = tab.share_link(**setup, request=a_request(host="class.example:7860"))
    url = link[link.index("(") + 1:-1]
    assert urlsplit(url).netloc == "class.example:7860"
    assert setup_from_query(dict(parse_qsl(urlsplit(url).query))) == (setup, [])


def test_the_estimate_warns_that_a_huge_batch_on_a_cpu_will_crawl(tab):
    low, high = spec("batch_size")["range"]
    crawling = tab.estimate(**{**FORM, "batch_size": high, "steps": 1000})
    assert "will crawl" in crawling and f"at batch {high}" in crawling
    quick = tab.estimate(**{**FORM, "batch_size": low, "steps": 1000})
    what, when = quick.split("  \n")
    assert when.startswith("About") and "crawl" not in quick
    # What will train, before Start: the run's plan in words (core/plan.py), worked out for this CPU.
    assert what == ("What will train: DCGAN (non-saturating), model size fast at 28x28 (auto: a small network at "
                    "the data's size (at most 32x32) trains in minutes on a CPU); class-conditional on 10 classes; "
                    "augmentation off: 1,000 images a class is at least 500; batch 1, fp32, 1,000 steps on " + tab.info.name + "."), what
    # Invalid settings: what Start would say.
    assert tab.estimate(**{**FORM, "batch_size": -1}) == (f"What will train: nothing yet. {spec('batch_size')['label']} "
                                                          f"must be between {low} and {high:,} (got -1).")
    assert tab.estimate(**{**FORM, "device": "quantum"}).startswith("What will train: nothing yet. Device 'quantum' is not")


def test_the_estimate_takes_the_speed_of_a_run_of_the_same_settings_and_says_what_it_assumes(tab, tmp_path):
    from app.train_form import time_note
    from core.plan import DataFacts, make_plan
    from core.rundir import RunDir
    plan = make_plan(TrainConfig(gan="dcgan", batch_size=128, steps=1000, device="cpu"), tab.info, DataFacts(60000, 28, 1, 10))
    rough = time_note(plan, str(tmp_path))
    assert "(rough: no run of these settings has trained here yet)" in rough and "if nothing else keeps it busy" in rough
    older = RunDir.create(plan, str(tmp_path))
    older.write_status("done", "", device_kind="cpu", preset="fast", gan="dcgan", batch_size=128, resolution=28,
                       images_per_second=1280.0)
    # The newest run trained at batch 1: its images a second say nothing of batch 128's; nor do those
    # of a run over two processes of one process's.
    newest = RunDir.create(plan, str(tmp_path))
    newest.write_status("done", "", device_kind="cpu", preset="fast", gan="dcgan", batch_size=1, resolution=28,
                        images_per_second=30.0)
    two = RunDir.create(plan, str(tmp_path))
    two.write_status("done", "", device_kind="cpu", processes=2, preset="fast", gan="dcgan", batch_size=128,
                     resolution=28, images_per_second=640.0)
    assert time_note(plan, str(tmp_path)).startswith(   # 1,000 steps x 128 images at 1,280 a second
        "About **1 min 40 s** for 1,000 steps on this CPU if nothing else keeps it busy (as a run of these settings "
        "measured on this server)."), time_note(plan, str(tmp_path))


def suggested_batches(warning: str) -> list[int]:
    """The batches a crawl warning offers instead ("... with batch 64 (about 0.6 s a step)")."""
    return [int(b) for b in re.findall(r"with batch (\d+)", warning)]


@pytest.mark.parametrize("gan, batch", [("wgan-gp", 128), ("dcgan", 4096), ("wgan-gp", 4096)])
def test_a_crawl_warning_offers_a_batch_that_does_not_crawl(tab, gan, batch):
    """The walk saw a batch-128 WGAN-GP run told to "use batch 128": the batch it offers must be
    smaller than the one chosen, and must itself get no warning."""
    warning = tab.estimate(**{**FORM, "gan": gan, "batch_size": batch, "steps": 1000})
    assert f"at batch {batch}" in warning and "will crawl" in warning, warning
    offered = suggested_batches(warning)
    assert len(offered) == 1 and offered[0] < batch, warning
    assert "crawl" not in tab.estimate(**{**FORM, "gan": gan, "batch_size": offered[0], "steps": 1000})
    if gan == "wgan-gp":   # its five critic updates a step are what crawl: the one-update types are named
        assert "5 critic updates of" in warning and "one critic update a step (DCGAN" in warning, warning
    assert "crawl" not in tab.estimate(**{**FORM, "batch_size": 128, "steps": 1000})   # the default run does not crawl


def test_the_preview_comes_back_from_the_viewer_work_process_as_plain_values(tab):
    """The handler goes through app/viewer_work's real worker process, as the page's does."""
    message, image = tab.preview_dataset("bundled-mnist", "")
    assert isinstance(message, str) and isinstance(image, np.ndarray) and image.dtype == np.uint8


def test_the_forms_labels_and_choices_are_the_ones_the_config_declares(tab):
    """Each form field is named, and offers the choices, exactly as its TrainConfig field declares:
    the page, the CLI's --help and the refusals all read the same declaration."""
    fields = ("dataset", "data_path", "gan", "preset", "batch_size", "precision", "device", "steps",
              "log_every", "grid_every", "checkpoint_every", "conditional", "seed")
    for name in fields:
        assert getattr(tab, name).label == spec(name)["label"], name
    for name in ("dataset", "gan", "preset", "device", "conditional"):
        offered = [value for _, value in getattr(tab, name).choices]
        assert offered == list(spec(name)["choices"]), name


def test_the_students_link_believes_forwarded_headers_only_behind_a_proxy(monkeypatch):
    from app.ui import page_url
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("BLINK_BEHIND_PROXY", raising=False)
    forged = {"host": "192.168.1.20:7860", "x-forwarded-host": "evil.example", "x-forwarded-proto": "javascript"}
    assert page_url(forged) == "http://192.168.1.20:7860/"            # not told of a proxy: the Host it was reached by
    monkeypatch.setenv("BLINK_BEHIND_PROXY", "1")
    assert page_url(forged) == ""                                     # told, but only http and https are links
    assert page_url({**forged, "x-forwarded-proto": "https, http"}) == "https://evil.example/"
    monkeypatch.delenv("BLINK_BEHIND_PROXY")
    monkeypatch.setenv("SPACE_ID", "teacher/blink")                   # a Space is always behind Hugging Face's proxy
    assert page_url({"host": "10.0.0.5:7860", "x-forwarded-host": "teacher-blink.hf.space",
                     "x-forwarded-proto": "https"}) == "https://teacher-blink.hf.space/"
    for host in ('a.example"><script>', "a.example/path", "", "a b"):   # no markup, paths or spaces from a header
        assert page_url({"host": host}, trust_forwarded=False) == "", host
    assert page_url({"host": "[::1]:7860"}, trust_forwarded=False) == "http://[::1]:7860/"


def test_the_forms_auto_type_and_empty_batch_start_what_the_plan_gives_for_the_images(tab):
    """The form opens on "auto" and a batch of 0 (the type's): the plan settles both for the chosen images
    (the relativistic pairing at 64 for MNIST on a CPU, DCGAN at 128 on own images), and says which."""
    from core.plan import DataFacts, make_plan
    assert (tab.gan.value, tab.batch_size.value) == ("auto", 0)
    config = tab.planned_start(**{**FORM, "gan": "auto", "batch_size": 0}).asked
    assert (config.gan, config.batch_size) == ("auto", None)   # as asked: the plan settles both
    digits = make_plan(config, tab.info, DataFacts(60000, 28, 1, 10))
    own = make_plan(dataclasses.replace(config, dataset="folder", data_path="x"), tab.info,
                    DataFacts(1000, 64, 3, 9))
    assert (digits.config.gan, digits.config.batch_size) == ("rpgan", 64)
    assert (own.config.gan, own.config.batch_size) == ("dcgan", 128)
    assert "Relativistic + R1 (R3GAN)" in tab.estimate(**{**FORM, "gan": "auto", "batch_size": None, "steps": 1000})
    assert "batch 64" in tab.estimate(**{**FORM, "gan": "auto", "batch_size": 0, "steps": 1000})   # the page sends an empty box as 0


def _classes(folder, classes: int, each: int) -> str:
    """A folder of `classes` subfolders of `each` small images, a colour each."""
    for c in range(classes):
        (folder / f"class{c}").mkdir(parents=True)
        for i in range(each):
            Image.fromarray(np.full((8, 8, 3), (80 * c, 10 * i, 0), np.uint8)).save(folder / f"class{c}" / f"{i}.png")
    return str(folder)


@pytest.mark.parametrize("form", [
    dict(dataset="folder", batch_size=16),            # own images in class subfolders
    dict(gan="auto", batch_size=0, precision="bf16"),  # the type and batch left to the plan, another precision
    dict(processes=2, batch_size=16),                 # two trainer processes (DDP over gloo)
])
def test_what_will_train_is_the_plan_the_trainer_writes(tab, tmp_path, monkeypatch, form):
    """The page's "What will train" is the plan Start uses, word for word, from every field: the one
    config.json holds, which the trainer (Start's road: the job's trainer process) checked against the
    data it loaded, trained and kept in its checkpoint."""
    import torch
    from core.plan import Plan
    from core.rundir import FINAL_STATES
    from tests.apphelpers import wait_for
    monkeypatch.setenv("BLINK_DATA_ROOTS", str(tmp_path))
    monkeypatch.setenv("BLINK_DATA_DIR", str(tmp_path / "cache"))
    if form.get("dataset") == "folder":
        form = {**form, "data_path": _classes(tmp_path / "pets", 3, 10)}
    asked = {**FORM, "steps": 2, **form}
    if form.get("precision") in tab.info.precision_refused:   # a CPU without bf16 units: both refuse it alike
        with pytest.raises(gr.Error) as refused:
            tab.planned_start(**asked)
        assert tab.estimate(**asked) == f"What will train: nothing yet. {refused.value.message}"
        return
    page = tab.plan_from_form(**asked)
    run = tab.job.start(tab.planned_start(**asked))
    ended = wait_for(lambda: (s := run.read_status()).state in FINAL_STATES and s, 180, interval=0.1,
                     what="the run to end")
    assert ended.state == "done", ended.message
    trained = Plan.from_dict(torch.load(run.file("checkpoint.pt"), weights_only=False)["plan"])
    assert run.read_plan() == trained == page and trained.describe() == page.describe()
    status = run.read_status()   # the trainer's own report of what it built
    assert (status.gan, status.preset, status.batch_size, status.classes, status.resolution, status.processes) == (
        page.config.gan, page.config.preset, page.config.batch_size, page.classes, page.resolution,
        page.device.processes)
    assert tab.estimate(**asked).startswith(f"What will train: {page.describe()}")
