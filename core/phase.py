"""What is happening in a run, in one line a room can read: the phase of its samples and what its
losses say, from the run's own logged values (events.jsonl).

Every rule is written once, here, with its threshold (a loss's own thresholds on its row in
core/gans.py); the trainer keeps a `Phase` fed with each loss point and quality measurement
(core/train.py) and writes `Phase.line()` and `Phase.warning()` into the status, so the page's
phase line and its warnings come from the same rules. tests/unit/test_phase.py replays recorded
runs (tests/data/phase/, made by tests/phase_scripts/record_runs.py) through them: a default run, a
forced collapse, a D that wins.

The thresholds were read off those recordings and the shipped meters' values for real images
(fd ~2, confident ~0.98, spread ~1.0) and for noise.
"""
from __future__ import annotations

from collections import deque

from core import gans

# ---- the samples' phase, from the quality meter ------------------------------------------
# MNIST family (the shipped digit classifier, core/quality.py): the Frechet distance of its features
# falls from ~2,000 (G's first grey texture) toward ~2 (real digits).
FD_BLOBS = 600.0        # below: shapes with a digit's size and brightness, no strokes yet
FD_STROKES = 150.0      # below: strokes; some samples read as digits
# Or these shares of the samples confidently digits, whatever the distance (the rest weigh it down):
# a line that said "noise" beside a meter reading digits contradicted the screen.
FEW_DIGITS = 0.1        # at least blobs
SOME_DIGITS = 0.2       # at least strokes
# "digits": core.quality.RECOGNIZABLE, the product's one criterion (80% confident, all ten digits).
# Once there, a run stays "digits" until fewer than this share read as digits (or a digit is
# missing): a meter reading near 80% from one measurement to the next flipped the line digits,
# strokes, digits in a default run.
DIGITS_KEPT = 0.7

# Any other dataset (the sliced Wasserstein distance): how far it has fallen from the run's first
# measurement (step 50), since its scale depends on the images. In the recorded colour run (discs
# and squares) the grids showed faint blobs at step 50, coloured blobs by step 100 (0.88 of the
# first distance) and blobs taking shape at 200-300 (0.72-0.75).
SWD_BLOBS = 0.92        # below this share of the first distance: blobs of the set's colours
SWD_SHAPES = 0.6        # below: the set's shapes and colours

# ---- problems ------------------------------------------------------------------------------
# Mode collapse: the samples' spread (core.quality.spread; real images ~1.0) was SPREAD_VARIED or
# more, and is now under SPREAD_COLLAPSED (in COLLAPSE_MEASURES measurements in a row). A G that never
# varied has not collapsed: an untrained G draws one grey image for every latent (spread 0.001 at
# step 10 of the default run, 0.43 at step 50, 0.85 by step 300), and WGAN-GP's slow start stays
# near 0.1 for its first hundred-odd steps.
SPREAD_VARIED = 0.6
SPREAD_COLLAPSED = 0.35
COLLAPSE_MEASURES = 1   # a fall from 0.6 to 0.35 over 1,024 samples is no measuring noise
# An unconditional G whose confident digits fall in FEW_CLASSES after it drew MANY_CLASSES has
# collapsed onto those few (each may still vary, so the spread need not fall).
MANY_CLASSES, FEW_CLASSES = 8, 3

# D is winning: over the last WINDOW loss points, G's loss rose by more than G_LOSS_RISE (its
# second half's mean over its first half's, minus 1) while D kept calling the batches apart: D(x) -
# D(G(z)) above the GAN type's `d_apart` (core/gans.py; no such rule where it is None).
WINDOW = 8
G_LOSS_RISE = 0.25
# D has won outright (D(x) and D(G(z)) past the GAN type's `d_won`: a D sure of every image) for
# this many loss points in a row: the generator gets no useful gradient. The warning that the page
# shows in its yellow box.
WON_OUTRIGHT_LOGS = 8

# The losses have settled: both losses' means over the last SETTLED_WINDOW points moved less than
# SETTLED_CHANGE (relative) between its halves, or by SETTLED_SCALE at most for losses near 0.
# Once settled, only a move twice that large unsettles them: a GAN's losses wobble by ~10%.
SETTLED_WINDOW = 16
SETTLED_CHANGE = 0.10
SETTLED_SCALE = 0.05

NOISE_WORDS = "noise: G has not learned anything yet"
NOISE_AGAIN_WORDS = "noise again: the samples have lost what G had learned"
STAGES = ("noise", "blobs", "strokes", "shapes", "digits")

D_WINS_WARNING = ("The discriminator has won outright for a long stretch (D(x)~1, D(G(z))~0): the generator "
                  "gets no useful gradient. Consider restarting with WGAN-GP or hinge loss.")
COLLAPSE_WARNING = ("The fakes all look alike (mode collapse): G has found a few images that fool D and makes "
                    "only those. Restarting with another seed, WGAN-GP or hinge loss usually helps.")
COLLAPSE_WORDS = "the fakes all look alike (mode collapse)"   # the line's, beside its stage


def d_has_won(values: dict, gan: gans.GanType) -> bool:
    """A D that calls the real images real and the fakes fake, outright, by its GAN type's `d_won`
    (never where that is None: a critic's scores or a hinge D's logits have no "sure")."""
    won = gan.d_won
    return won is not None and "d_real" in values and values["d_real"] > won[0] and values["d_fake"] < won[1]


def percent(share: float) -> str:
    """A share as a whole percentage, rounded down: 0.796 is 79%, never the 80% of a rule it misses."""
    return f"{int(share * 100 + 1e-9)}%"


def samples_stage(quality: dict, first_swd: float | None) -> tuple[str, str]:
    """(stage, words) for the newest quality measurement: noise, blobs, strokes/shapes, digits."""
    from core.quality import RECOGNIZABLE
    if "quality_fd" in quality:
        fd, confident = quality["quality_fd"], quality.get("quality_confident", 0.0)
        if confident >= RECOGNIZABLE["confident"] and quality.get("quality_classes", 0) >= RECOGNIZABLE["classes"]:
            return "digits", f"digits: {percent(confident)} of the samples read as digits, all ten of them"
        if fd < FD_STROKES or confident >= SOME_DIGITS:
            return "strokes", "strokes: the samples are taking shape, and some already read as digits"
        if fd < FD_BLOBS or confident >= FEW_DIGITS:
            return "blobs", "blobs: bright shapes where digits go, their strokes still blurred"
        return "noise", NOISE_WORDS
    if "quality_swd" in quality and first_swd:
        share = quality["quality_swd"] / first_swd
        if share < SWD_SHAPES:
            return "shapes", "shapes: the set's shapes and colours are appearing"
        if share < SWD_BLOBS:
            return "blobs", "blobs: patches of the set's colours, no shapes yet"
        return "noise", NOISE_WORDS
    return "", ""


def collapsed(recent_quality: list[dict], best_spread: float, most_classes: float, conditional: bool) -> bool:
    """The fakes all look alike: G's samples once varied as the real images do, and over the last
    COLLAPSE_MEASURES measurements they varied far less, or an unconditional G's digits fell in a
    few classes after it had drawn most of them."""
    if len(recent_quality) < COLLAPSE_MEASURES:
        return False
    recent = recent_quality[-COLLAPSE_MEASURES:]
    if best_spread >= SPREAD_VARIED and all(q.get("quality_spread", 1.0) < SPREAD_COLLAPSED for q in recent):
        return True
    return (not conditional and most_classes >= MANY_CLASSES
            and all(q.get("quality_confident", 0.0) >= 0.5 and q.get("quality_classes", 10) <= FEW_CLASSES
                    for q in recent))


def _halves(points: list[dict], key: str) -> tuple[float, float]:
    """The means of `key` over the first and the second half of `points`."""
    half = len(points) // 2
    return (sum(p[key] for p in points[:half]) / half, sum(p[key] for p in points[half:]) / (len(points) - half))


def d_winning(points: list[dict], gan: gans.GanType) -> bool:
    """G's loss keeps climbing while D keeps telling real from fake (where the GAN type has a `d_apart`)."""
    apart = gan.d_apart
    if apart is None or len(points) < WINDOW:
        return False
    window = points[-WINDOW:]
    early, late = _halves(window, "loss_g")
    return (late - early > G_LOSS_RISE * max(abs(early), SETTLED_SCALE)
            and all(p.get("d_real", 0.0) - p.get("d_fake", 0.0) > apart for p in window[WINDOW // 2:]))


def settled(points: list[dict], tolerance: float = SETTLED_CHANGE) -> bool:
    """Both losses' means over the last SETTLED_WINDOW points barely moved between its halves."""
    if len(points) < SETTLED_WINDOW:
        return False
    window = points[-SETTLED_WINDOW:]
    return all(abs(late - early) <= max(tolerance * abs(early), SETTLED_SCALE)
               for early, late in (_halves(window, key) for key in ("loss_d", "loss_g")))


class Phase:
    """The rules above over one run's values, as they are logged."""

    def __init__(self, gan: gans.GanType, conditional: bool, events: list[dict] = (), measured: bool = True):
        """measured: the run has a quality meter (quality_every > 0); without it there is no stage."""
        self.gan, self.conditional, self.measured = gan, conditional, measured
        self.points: deque[dict] = deque(maxlen=max(WINDOW, SETTLED_WINDOW))
        self.measures: deque[dict] = deque(maxlen=COLLAPSE_MEASURES)
        self.first_swd: float | None = None
        self.best_spread, self.most_classes = 0.0, 0.0
        self.furthest_stage = 0   # index in STAGES: the samples' best stage so far
        self.won_streak = 0
        self.is_settled = False
        for event in events:   # a resumed run (or the next chunk) picks up where its events are
            self.add(event)

    def add(self, event: dict) -> None:
        """A loss point ({"loss_d", "loss_g", ...}) or a quality measurement ({"quality_...": ...})."""
        # A stepped update (the host's Step while paused) is one noisy update among log points a
        # log_every apart: the rules over loss points leave it out.
        if "loss_d" in event and "loss_g" in event and not event.get("stepped"):
            self.points.append(event)
            self.won_streak = self.won_streak + 1 if d_has_won(event, self.gan) else 0
            self.is_settled = settled(list(self.points), SETTLED_CHANGE * (2 if self.is_settled else 1))
        if any(key.startswith("quality_") for key in event):
            self.measures.append(event)
            self.best_spread = max(self.best_spread, event.get("quality_spread", 0.0))
            self.most_classes = max(self.most_classes, event.get("quality_classes", 0.0))
            if self.first_swd is None and "quality_swd" in event:
                self.first_swd = event["quality_swd"]
            stage = samples_stage(event, self.first_swd)[0]
            if stage:
                self.furthest_stage = max(self.furthest_stage, STAGES.index(stage))

    def _collapsed(self) -> bool:
        return collapsed(list(self.measures), self.best_spread, self.most_classes, self.conditional)

    @property
    def quality(self) -> dict:
        return self.measures[-1] if self.measures else {}

    def stage(self) -> str:
        return self._stage()[0]

    def _stage(self) -> tuple[str, str]:
        if not self.measures and self.points and self.measured:   # before the first measurement
            return "noise", "noise: G starts from random weights, and learns from D's first verdicts"
        stage, words = samples_stage(self.quality, self.first_swd)
        if stage == "noise" and self.furthest_stage > 0:
            return stage, NOISE_AGAIN_WORDS
        confident = self.quality.get("quality_confident", 0.0)
        if stage == "strokes" and self.furthest_stage == STAGES.index("digits") and confident >= DIGITS_KEPT \
                and self.quality.get("quality_classes", 0) >= 10:
            return "digits", f"digits: {percent(confident)} of the samples read as digits, all ten of them"
        return stage, words

    def line(self) -> str:
        """E.g. 'strokes: the samples are taking shape ... · D is winning: G's loss keeps climbing'.
        What goes wrong comes after the stage, the cause first; a collapsed run's stage is left out:
        its words describe samples that differ."""
        problems = self.problems()
        words = "" if COLLAPSE_WORDS in problems else self._stage()[1]
        parts = ([words] if words else []) + problems
        if not problems and self.is_settled:
            parts.append("the losses have settled: D and G are in balance, and the grid shows whether the "
                         "images still improve")
        return " · ".join(parts)

    def problems(self) -> list[str]:
        """What goes wrong now, in the line's words, the cause first; [] for a healthy run."""
        found = []
        if self.won_streak >= WON_OUTRIGHT_LOGS:
            found.append("D has won: it is sure of every image, and G learns nothing")
        elif d_winning(list(self.points), self.gan):
            found.append("D is winning: G's loss keeps climbing")
        if self._collapsed():
            found.append(COLLAPSE_WORDS)
        return found

    def warning(self) -> str:
        """The warning the status carries (the page's yellow box): the problems a restart fixes."""
        if self.won_streak >= WON_OUTRIGHT_LOGS:
            return D_WINS_WARNING
        if self._collapsed():
            return COLLAPSE_WARNING
        return ""
