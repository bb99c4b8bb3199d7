"""The GAN types, one row each: everything the config, the models, the losses, the trainer's
verdicts and phase rules and the page know about a loss family; nothing else names a GAN type.
Adding a loss means adding a row here and its class in core/losses.py (or naming an existing one).

No torch here: the UI process reads labels, plotted series and healthy ranges from this module
without paying for the trainer's imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.devices import is_cpu


@dataclass(frozen=True)
class GanType:
    name: str                   # the config's and the CLI's value
    label: str                  # the page's choice
    loss: str                   # the loss class in core/losses.py
    # What D's output on an image is, as the page frames it (app/static/live.js): "probability"
    # (the sigmoid of D's logit, real above 0.5), "logit" (real above 0), "score" (a critic's:
    # higher is more real, no fixed line between real and fake) or "pair" (a relativistic D's: the
    # probability that the image is the real one of a pair with an average image of the other grid,
    # sigmoid(D(y) minus the other grid's mean score), real above 0.5).
    verdict: str
    defaults: dict[str, Any]    # the paper's Adam settings and critic steps, for hyper-parameters left None
    d_norm: str                 # the discriminator's normalisation: batch | layer | none
    # The loss's stats keys -> plot labels, beyond loss_d and loss_g: exactly the keys its loss
    # returns (tests/unit/test_losses.py), which the trainer logs and the page plots by name.
    series: dict[str, str]
    healthy: dict[str, str]     # one line under the "losses" and "extra" plots: what healthy curves look like
    spectral: bool = False      # spectral norm on the discriminator's layers
    gradient_penalty: bool = False   # the loss takes gp_weight
    fast_defaults: dict[str, Any] = field(default_factory=dict)   # the CPU "fast" preset's own values
    cpu_cost: float = 1.0       # time per image against DCGAN's on a CPU, for the estimate before any run
    # Augmentation's strength follows the sign of D's logits on real images (core/augment.py; a
    # relativistic D's, of each real image's score less its fake's); False where D's output has no
    # sign to read: then every image is augmented.
    adaptive_augment: bool = True
    # The phase rules (core/phase.py); None where a rule does not apply to this loss.
    d_apart: float | None = None     # "D is winning": D(x) - D(G(z)) stays above this while G's loss climbs
    d_won: tuple[float, float] | None = None   # "D has won": D(x) above the first and D(G(z)) below the second
    log_scale: bool = False     # the page's charts start on a log scale
    # The page's "What is a GAN?" panel: D's and G's losses in words, and what to watch for.
    primer: dict[str, str] = field(default_factory=dict)
    # Where the loss is refused (core/plan.py), by reason: "xla" (a TPU, XLA:CPU), "processes"
    # (several trainer processes, DDP); a type trains everywhere else.
    refused: dict[str, str] = field(default_factory=dict)


# R3GAN's RpGAN beside its lazy R1: what was measured to reach digits soonest on a CPU (lab/README.md,
# "The relativistic loss" and the sections after it), on the fast preset's BatchNorm D.
RELATIVISTIC_NOT_HERE = ("its lazy R1 penalty through a BatchNorm D has been measured on a CPU only (a second "
                         "step graph on XLA, double backward through synchronised BatchNorm under DDP)")

GAN_TYPES = (
    GanType(
        name="dcgan", label="DCGAN (non-saturating)", loss="NonSaturating", verdict="probability",
        # Radford et al. 2015 (the seed's DCGAN): Adam lr 2e-4, betas (0.5, 0.999), one D step per G step.
        defaults=dict(lr_g=2e-4, lr_d=2e-4, beta1=0.5, beta2=0.999, n_critic=1),
        # The CPU preset's values were measured fastest to digits on MNIST, the EMA and the
        # second-half decay included (lab/README.md, "Conditional" and "Issue 17"); the seed's
        # 64x64 DCGAN keeps the paper's.
        fast_defaults=dict(lr_g=3e-3, lr_d=3e-3, beta1=0.0, beta2=0.99, ema=0.99, lr_decay_start=0.5),
        d_norm="batch",
        series={"d_real": "D(x)", "d_fake": "D(G(z))"},
        # Read off the recorded runs (core/phase.py, tests/data/phase/): D(x) and D(G(z)) are
        # probabilities here, so a D sure of every image sits at 1 and 0.
        d_apart=0.6, d_won=(0.99, 0.01),
        healthy={
            "losses": "Healthy: D loss around 0.5-1.4 and G loss around 0.7-3, wobbling with no trend. "
                      "D loss sliding to 0 while G loss climbs means D has won.",
            "extra": "Healthy: D(x) around 0.5-0.8 and D(G(z)) around 0.2-0.5. Pinned at 1 and 0: D has won.",
        },
        primer={
            "d": "D outputs the probability that an image is real, D(x). Its loss, -log D(x) - log(1 - D(G(z))), "
                 "falls as it calls real images real and fakes fake.",
            "g": "G's loss, -log D(G(z)) (the non-saturating form), falls as D takes its fakes for real.",
            "watch": "D(x) and D(G(z)) in the second chart. If they sit at 1 and 0 for long, D has won and G "
                     "gets almost no signal; the page warns you.",
        }),
    GanType(
        name="wgan-gp", label="WGAN-GP", loss="WGANGP", verdict="score",
        # Gulrajani et al. 2017: Adam(0, 0.9), 5 critic steps per generator step, lambda 10.
        defaults=dict(lr_g=1e-4, lr_d=1e-4, beta1=0.0, beta2=0.9, n_critic=5),
        d_norm="layer",   # the penalty needs per-sample gradients: no batch statistics in the critic
        gradient_penalty=True,
        cpu_cost=2.5,     # the penalty's second backward pass
        adaptive_augment=False,   # a critic's scores have no sign to read
        # No "D is winning" rule: the critic's scores have no fixed scale, and G's loss (minus the
        # fakes' score) drifts up in healthy runs too (the recorded one's first steps, tests/data/phase/).
        log_scale=True,   # the critic's early swings of tens would flatten the rest of the curves
        series={"wasserstein": "Wasserstein estimate", "gp": "gradient penalty"},
        healthy={
            "losses": "Healthy: the critic's loss is negative and shrinks toward 0 as G improves; "
                      "a steady climb or wild swings mean trouble.",
            "extra": "Healthy: the Wasserstein estimate (-30...+40 early) falls toward a few units; "
                     "the gradient penalty stays small (below ~1).",
        },
        primer={
            "d": "D is a critic: it gives each image a score, higher meaning more real (not a probability). Its "
                 "loss, score(fake) - score(real) + 10 x a gradient penalty, falls as it scores reals above fakes; "
                 "the penalty keeps its scores from changing too steeply.",
            "g": "G's loss, -score(fake), falls as the critic scores its fakes higher.",
            "watch": "the Wasserstein estimate, score(real) - score(fake): it falls as the fakes come closer to "
                     "the real images. The critic trains 5 steps for each step of G.",
        }),
    GanType(
        name="hinge", label="Hinge + spectral norm (SNGAN)", loss="Hinge", verdict="logit",
        # Miyato et al. 2018 (SNGAN, hinge): Adam 2e-4, betas (0.0, 0.9), n_dis 1 for the DCGAN-sized nets.
        defaults=dict(lr_g=2e-4, lr_d=2e-4, beta1=0.0, beta2=0.9, n_critic=1),
        d_norm="none", spectral=True,
        series={"d_real": "D(x) logit", "d_fake": "D(G(z)) logit"},
        d_apart=2.0,   # the logits' difference: a hinge D aims for real above 1 and fakes below -1
        healthy={
            "losses": "Healthy: D loss around 0.5-2 (2: D cannot tell real from fake; 0: D wins outright), "
                      "G loss around 0-1.5.",
            "extra": "Healthy: D(x) logit above 0 and D(G(z)) logit below 0, drawing closer as G improves.",
        },
        primer={
            "d": "D gives each image a score (a logit: above 0 says real, below 0 fake). Its hinge loss, "
                 "max(0, 1 - D(x)) + max(0, 1 + D(G(z))), is 0 once reals score above 1 and fakes below -1; "
                 "spectral norm keeps D smooth.",
            "g": "G's loss, -D(G(z)), falls as D scores its fakes higher.",
            "watch": "the two logits in the second chart drawing closer as G improves. A D loss near 2 means D "
                     "cannot tell real from fake; near 0, D wins outright.",
        }),
    GanType(
        name="rpgan", label="Relativistic + R1 (R3GAN)", loss="RelativisticPairing", verdict="pair",
        # Adam (0, 0.99) as R3GAN's; the fast preset's lr measured on MNIST (lab/README.md, "The
        # relativistic loss at smaller batches"), D's lower than G's for the digits a minute in (lab/README.md,
        # "The pairing's learning rates at a minute").
        defaults=dict(lr_g=2e-4, lr_d=2e-4, beta1=0.0, beta2=0.99, n_critic=1),
        # Batch 64: at the CPU's two threads the pairing reaches digits in fewer seconds at 64 than at 128
        # (lab/README.md, "The relativistic loss at smaller batches").
        fast_defaults=dict(lr_g=5e-3, lr_d=3e-3, ema=0.99, lr_decay_start=0.5, batch_size=64),
        d_norm="batch",
        cpu_cost=1.16,   # D's fourth pass (on the real batch again, for G) and R1 every 16 of its updates
        # Augmentation follows the sign of each pair's difference, real above its fake (core/losses.py):
        # augmenting every image drew checkerboards on the emoji set (lab/README.md).
        series={"d_real": "D(x) score", "d_fake": "D(G(z)) score"},
        # The scores' difference is what D's loss reads: apart by 3, a pair's loss is below 0.05 (D
        # takes the real image for the real one with p > 0.95); its healthy 10-minute run kept the
        # loss well above that (below). A score has no "sure", so no "D has won" rule.
        d_apart=3.0,
        # Read off two 10-minute runs, at an earlier D rate and at the fast preset's (lab/README.md, "The
        # relativistic loss at smaller batches" and "The pairing's learning rates at a minute"): both
        # losses near log 2 when neither wins; D(x) above D(G(z)) at almost every log point, the two
        # drifting together well below 0.
        healthy={
            "losses": "Healthy: D loss around 0.5-1.3 and G loss around 0.9-1.8 (higher in the first hundred "
                      "steps), with no trend. D loss sliding toward 0 while G loss climbs means D tells every "
                      "real image from its fake.",
            "extra": "Healthy: D(x) a little above D(G(z)), the two moving together. Only their difference "
                     "counts: both may drift far below 0.",
        },
        primer={
            "d": "D gives each image a score and compares pairs: a real image and a fake. Its loss, "
                 "softplus(-(D(x) - D(G(z)))), falls as it scores each real image above its fake; now and then "
                 "a penalty (R1) keeps its scores from changing steeply around the real images.",
            "g": "G's loss, the same with the roles swapped, softplus(-(D(G(z)) - D(x))), falls as its fakes "
                 "score above the real images they are paired with.",
            "watch": "the gap between D(x) and D(G(z)) in the second chart: it narrows as the fakes come closer. "
                     "The scores themselves have no fixed scale.",
        },
        refused={"xla": RELATIVISTIC_NOT_HERE, "processes": RELATIVISTIC_NOT_HERE}),
)


def by_name(rows: tuple[GanType, ...]) -> dict[str, GanType]:
    """The rows keyed by name, in their order; two rows of one name are a mistake, refused."""
    named = {gan.name: gan for gan in rows}
    if len(named) != len(rows):
        raise ValueError(f"two GAN types share a name: {[gan.name for gan in rows]}")
    return named


BY_NAME = by_name(GAN_TYPES)
NAMES = tuple(BY_NAME)


# Where "auto" is the relativistic pairing: the digits it was measured on. On own colour images it fell
# behind DCGAN from the second minute of a 10-minute run (lab/README.md, "Own images: the adaptive
# pairing over 10 minutes").
RELATIVISTIC_DATASETS = ("bundled-mnist", "mnist")


def auto_name(preset: str, device_kind: str, processes: int, dataset: str) -> str:
    """The type a config's "auto" becomes: the relativistic pairing where it reaches digits soonest, the
    digits on the fast preset on a CPU in one process (bench/README.md, "Speed and start-up"); DCGAN
    elsewhere (the seed's 64x64 DCGAN on a GPU or TPU, own images, and every road the pairing has not
    been measured on)."""
    fastest = (preset == "fast" and is_cpu(device_kind) and processes <= 1 and dataset in RELATIVISTIC_DATASETS)
    return "rpgan" if fastest else "dcgan"


def get(name: str) -> GanType:
    """The row of a GAN type, or a ValueError that lists the ones there are."""
    if name not in BY_NAME:
        raise ValueError(f"unknown GAN type '{name}'; choose one of: {', '.join(NAMES)}")
    return BY_NAME[name]
