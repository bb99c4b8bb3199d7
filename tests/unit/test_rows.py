"""The rows (core/gans.py GAN_TYPES, core/data/sources.py SOURCES) held together with the page and
the CLI: every row is a choice of both, and a GAN type is added as CONTRIBUTING.md says, by its row
alone, with nothing else keyed by its name."""
import json
import os
import subprocess
import sys

import pytest

from app.job import Job
from app.live import LiveFeed
from app.train_form import AUTO_GAN_LABEL
from app.ui import DeviceCache, TrainTab
from core import gans
from core.data.sources import SOURCES
from core.rundir import RunDir
from core.train import _parser
from tests.apphelpers import ROOT


@pytest.fixture(scope="module")
def tab(tmp_path_factory):
    job = Job(runs_root=str(tmp_path_factory.mktemp("runs")))
    yield TrainTab(job, LiveFeed(job), DeviceCache())
    job.shutdown()


def cli_choices(flag: str) -> list[str]:
    """The choices `python -m core.train --help` lists for a flag ("...; one of: a, b (default: a)")."""
    helps = {action.dest: action.help for action in _parser()._actions}
    return helps[flag].split("one of: ")[1].split(" (default")[0].split(", ")


def test_every_gan_type_and_dataset_is_a_choice_of_the_page_and_of_the_cli(tab):
    assert tab.gan.choices == [(AUTO_GAN_LABEL, "auto")] + [(gan.label, gan.name) for gan in gans.GAN_TYPES]
    assert tab.dataset.choices == [(source.label, source.key) for source in SOURCES.values()]
    assert cli_choices("gan") == ["auto", *(gan.name for gan in gans.GAN_TYPES)]
    assert cli_choices("dataset") == list(SOURCES)


def test_two_gan_types_of_one_name_are_refused():
    with pytest.raises(ValueError, match="share a name"):
        gans.by_name((*gans.GAN_TYPES, gans.get("hinge")))


# A new GAN type as CONTRIBUTING.md adds one: a row in core/gans.py, its loss a class of
# core/losses.py (here an existing one: DCGAN's loss on a spectral-norm D). The row joins the tuple
# before anything else imports it, as if it had been written there; then the CLI trains it.
NEW_ROW = """
import dataclasses, json, sys
from core import gans
row = dataclasses.replace(gans.get("dcgan"), name="dcgan-sn", label="DCGAN + spectral norm", d_norm="none",
                          spectral=True)
gans.GAN_TYPES = (*gans.GAN_TYPES, row)
gans.BY_NAME = gans.by_name(gans.GAN_TYPES)
gans.NAMES = tuple(gans.BY_NAME)

from app import live, views
from core import train
code = train.main(["--gan", "dcgan-sn", "--steps", "2", "--batch-size", "16", "--device", "cpu", "--log-every", "1",
                   "--grid-every", "1", "--quality-every", "0", "--run-dir", sys.argv[1]])
print(json.dumps({"code": code, "help": train._parser().format_help(), "extra": live.series_labels("dcgan-sn")["extra"],
                  "healthy": views.healthy_lines("dcgan-sn"), "primer": views.gan_primer_html()}))
"""


def test_a_gan_type_is_added_by_its_row_alone(tmp_path, cache):
    run_path = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", NEW_ROW, str(run_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout.strip().splitlines()[-1])
    assert said["code"] == 0 and "dcgan-sn" in said["help"]
    run = RunDir(str(run_path))
    with open(run.file("config.json")) as f:   # this process has no such row: its plan is read as text
        assert run.read_status().state == "done" and json.load(f)["config"]["gan"] == "dcgan-sn"
    # Its loss's own series are logged and plotted, with its row's lines under the plots.
    dcgan = gans.get("dcgan")
    events = [e for e in run.read_events()[0] if "loss_d" in e]
    assert [e["step"] for e in events] == [1, 2] and all(set(dcgan.series) <= set(e) for e in events)
    # The frames' lines (D's verdicts on the grids) follow its row's verdict kind.
    from app.live import FRAME_SERIES
    assert said["extra"] == {**dcgan.series, **FRAME_SERIES[dcgan.verdict]}
    assert said["healthy"]["losses"] == dcgan.healthy["losses"]
    assert "DCGAN + spectral norm" in said["primer"]
    # D's verdicts on each grid are of its row's kind: probabilities, so the sigmoid of D's logits.
    for step, _ in run.grids():
        verdicts = run.read_verdicts(step)
        assert verdicts["kind"] == "probability" and len(verdicts["fake"]) == len(verdicts["real"]) == 60
        assert all(0 <= v <= 1 for v in verdicts["fake"] + verdicts["real"])
    assert [step for step, _ in run.grids()] == [1, 2]
