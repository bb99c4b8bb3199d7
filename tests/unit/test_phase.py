"""core/phase.py's rules on recorded runs: real CLI runs (tests/phase_scripts/record_runs.py, whose
docstring says how each was made) replayed event by event, as the trainer feeds them."""
import json
import os

import pytest

from core import gans, phase
from core.phase import Phase

RECORDED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "phase")
# name: (GAN type, class-conditional)
RUNS = {"mnist": ("dcgan", True), "wgan": ("wgan-gp", True), "d_wins": ("dcgan", True),
        "collapse": ("dcgan", False), "colour": ("dcgan", False)}
ORDER = ["noise", "blobs", "strokes", "shapes", "digits"]


def events(name: str) -> list[dict]:
    with open(os.path.join(RECORDED, f"{name}.jsonl")) as f:
        return [json.loads(line) for line in f]


def replay(name: str) -> list[tuple[int, str, str, str]]:
    """(step, stage, line, warning) after each event, as the trainer's status would carry them."""
    gan, conditional = RUNS[name]
    followed = Phase(gans.get(gan), conditional)
    seen = []
    for event in events(name):
        followed.add(event)
        seen.append((event["step"], followed.stage(), followed.line(), followed.warning()))
    return seen


def first_step(seen, predicate) -> int | None:
    return next((step for step, *rest in seen if predicate(*rest)), None)


def test_a_default_run_goes_from_noise_through_blobs_and_strokes_to_digits_with_nothing_wrong_said():
    seen = replay("mnist")
    stages = [stage for _, stage, _, _ in seen if stage]
    assert [s for i, s in enumerate(stages) if i == 0 or s != stages[i - 1]] == ["noise", "blobs", "strokes", "digits"]
    assert first_step(seen, lambda stage, line, warning: stage == "digits") <= 600
    assert all(warning == "" for *_, warning in seen)
    assert not any("look alike" in line or "D is winning" in line or "D has won" in line for _, _, line, _ in seen)
    # Its losses level off once the digits are there, and the line says so.
    assert "the losses have settled" in seen[-1][2]


def test_wgan_gps_slow_start_is_not_called_a_collapse():
    seen = replay("wgan")
    assert all(warning == "" for *_, warning in seen)
    assert not any("look alike" in line for _, _, line, _ in seen)


def test_a_forced_collapse_is_named_on_the_line_and_in_the_warning():
    """The recording trains as usual to step 300, then G draws one image for every latent."""
    seen = replay("collapse")
    named = first_step(seen, lambda stage, line, warning: "the fakes all look alike" in line)
    assert named is not None and 300 < named <= 350   # the first measurement after the collapse
    assert "strokes" in [stage for step, stage, _, _ in seen if step < 300]   # it had learned first
    since = next(i for i, (_, _, line, _) in enumerate(seen) if "look alike" in line)
    assert all(warning == phase.COLLAPSE_WARNING for *_, warning in seen[since:])


def test_a_d_that_wins_is_said_to_be_winning_then_to_have_won_with_the_warning():
    seen = replay("d_wins")
    winning = first_step(seen, lambda stage, line, warning: "D is winning: G's loss keeps climbing" in line)
    won = first_step(seen, lambda stage, line, warning: warning == phase.D_WINS_WARNING)
    assert winning is not None and won is not None and winning <= won <= 25 * phase.WON_OUTRIGHT_LOGS
    assert "D has won" in seen[-1][2] and seen[-1][3] == phase.D_WINS_WARNING


def test_a_colour_run_that_d_wins_goes_from_noise_to_blobs_then_back_and_its_fakes_collapse():
    """The recorded colour run is the one issue 30 describes: blobs of the set's colours, then D
    wins (its loss 0.02 at step 375) and G's samples fall back and all look alike."""
    seen = replay("colour")
    stages = [stage for _, stage, _, _ in seen if stage]
    assert stages[0] == "noise" and "blobs" in stages and "shapes" not in stages
    assert first_step(seen, lambda stage, line, warning: stage == "blobs") <= 100
    assert any("D is winning" in line for _, _, line, _ in seen)
    assert "look alike" in seen[-1][2] and seen[-1][3] == phase.COLLAPSE_WARNING


def test_the_colour_stages_follow_the_distances_fall_from_its_first_measurement():
    first = 300.0
    stage = [phase.samples_stage({"quality_swd": first * share}, first)[0] for share in (1.0, 0.9, 0.61, 0.59)]
    assert stage == ["noise", "blobs", "blobs", "shapes"]


@pytest.mark.parametrize("name", RUNS)
def test_a_resumed_run_picks_up_the_line_from_its_events(name):
    """A resumed run, or ZeroGPU's next chunk, builds its Phase from the events logged so far."""
    gan, conditional = RUNS[name]
    logged = events(name)
    half = len(logged) // 2
    resumed = Phase(gans.get(gan), conditional, logged[:half])
    unbroken = Phase(gans.get(gan), conditional)
    for event in logged[:half]:
        unbroken.add(event)
    for event in logged[half:]:
        resumed.add(event)
        unbroken.add(event)
        assert (resumed.line(), resumed.warning()) == (unbroken.line(), unbroken.warning())


def test_without_a_quality_meter_there_is_no_stage_only_what_the_losses_say():
    kept = [e for e in events("d_wins") if "loss_d" in e]
    followed = Phase(gans.get("dcgan"), True, kept, measured=False)
    assert followed.stage() == "" and followed.line().startswith("D has won")


def test_a_share_of_confident_digits_lifts_the_stage_whatever_the_distance():
    """The distance lags while most samples are still noise: a fifth confidently digits is strokes,
    a tenth at least blobs, never "noise" beside a meter that reads digits."""
    far = {"quality_fd": 900.0, "quality_classes": 3}
    assert [phase.samples_stage({**far, "quality_confident": c}, None)[0] for c in (0.05, 0.12, 0.21)] == [
        "noise", "blobs", "strokes"]


def test_stepped_updates_trip_no_rule():
    """A host stepping a paused run one update at a time logs every update: sixteen steady points
    would otherwise say the losses settled (seen at step 99 of a stepped run), and a streak of D's
    outright wins would say D has won."""
    steady = [{"step": s, "loss_d": 0.5, "loss_g": 3.0, "d_real": 0.999, "d_fake": 0.001} for s in range(1, 17)]
    logged = Phase(gans.get("dcgan"), True, steady, measured=False)
    assert logged.is_settled and logged.line().startswith("D has won")
    stepped = Phase(gans.get("dcgan"), True, [{**e, "stepped": True} for e in steady], measured=False)
    assert not stepped.is_settled and stepped.won_streak == 0 and stepped.warning() == ""


def test_d_has_won_only_when_it_calls_both_batches_outright():
    assert phase.d_has_won({"loss_d": 0.01, "d_real": 0.999, "d_fake": 0.001}, gans.get("dcgan"))
    assert not phase.d_has_won({"d_real": 0.999, "d_fake": 0.02}, gans.get("dcgan"))      # fakes still fool it sometimes
    assert not phase.d_has_won({"d_real": 0.98, "d_fake": 0.001}, gans.get("dcgan"))
    assert not phase.d_has_won({"wasserstein": 5.0, "gp": 0.1}, gans.get("wgan-gp"))      # a critic reports no probabilities
    assert not phase.d_has_won({"d_real": 5.0, "d_fake": -5.0}, gans.get("hinge"))         # logits have no "sure"


def test_every_viewers_status_line_leads_with_the_phase():
    from app import views
    from core.status import Status
    line = views.status_line(Status(state="running", step=90, steps=2000, phase=replay("mnist")[20][2]), "run-1")
    assert "**Now:** strokes: the samples are taking shape" in line


def test_d_is_winning_for_the_relativistic_pairing_when_its_scores_stay_apart_while_gs_loss_climbs():
    """Its scores have no fixed scale, but their difference is what its D's loss reads."""
    def climbing(gap):
        return [{"step": s, "loss_d": 0.05, "loss_g": 2.0 + s, "d_real": -4.0 + gap, "d_fake": -4.0}
                for s in range(1, 9)]
    assert phase.d_winning(climbing(3.5), gans.get("rpgan"))
    assert not phase.d_winning(climbing(0.5), gans.get("rpgan"))   # a healthy gap: the scores move together


def test_digits_once_read_stay_digits_through_a_readings_wobble_and_no_share_is_rounded_up_past_a_rule():
    """A meter reading near the 80% rule flipped the line digits, strokes, digits; now the line stays
    "digits" until fewer than DIGITS_KEPT read as digits, and 0.796 is said 79%, not the rule's 80%."""
    followed = Phase(gans.get("dcgan"), conditional=True)
    readings = [(0.85, 10), (0.796, 10), (0.72, 10), (0.66, 10), (0.83, 10), (0.9, 9)]
    stages = []
    for step, (confident, classes) in enumerate(readings, start=1):
        followed.add({"step": step * 100, "quality_fd": 20.0, "quality_confident": confident,
                      "quality_classes": classes, "quality_spread": 0.9})
        stages.append(followed.stage())
    assert stages == ["digits", "digits", "digits", "strokes", "digits", "strokes"], stages
    assert phase.percent(0.796) == "79%" and phase.percent(0.8) == "80%" and phase.percent(0.07) == "7%"
