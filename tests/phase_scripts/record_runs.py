"""Records the runs that tests/unit/test_phase.py replays through core/phase.py's rules: real CLI
runs (core.train.main, the trainer a user starts), their events.jsonl kept whole.

    python tests/phase_scripts/record_runs.py [NAME ...]     # all of them by default

- mnist:    the default run on the bundled MNIST: noise, blobs, strokes, then digits.
- wgan:     WGAN-GP's first 400 steps (five critic updates a step: a slow start).
- d_wins:   DCGAN with D's learning rate 20x G's and G's 100x smaller than its default: D calls
            every real image real and every fake fake, and G's loss climbs.
- collapse: a forced mode collapse: an unconditional run trains as usual to step 300 (its samples
            vary as digits do), then G is given one latent for the whole batch (the batch's mean),
            so every fake is the same image however the latents differ.
- colour:   a folder of 600 coloured discs and squares at 32x32 (made here): the colour meter's run.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
OUT = os.path.join(ROOT, "tests", "data", "phase")

COMMON = ["--log-every", "25", "--quality-every", "50", "--grid-every", "1000", "--checkpoint-every", "100000",
          "--seed", "0"]
RUNS = {
    "mnist": ["--steps", "1000", "--quality-every", "10"],
    "wgan": ["--steps", "400", "--gan", "wgan-gp", "--quality-every", "10"],
    "d_wins": ["--steps", "800", "--lr-d", "2e-3", "--lr-g", "2e-6"],
    "collapse": ["--steps", "700", "--conditional", "off"],
    "colour": ["--steps", "600", "--dataset", "folder", "--grid-every", "100"],
}


COLLAPSE_AT_STEP = 300


def one_latent_for_the_batch_from(first_step: int) -> None:
    """The forced collapse: from `first_step` on, every generator sees its batch's mean latent."""
    from core import models, training
    collapsing = {"on": False}
    real_forward, real_step = models.Generator.forward, training.Training.step

    def forward(self, z, labels=None):
        return real_forward(self, z.mean(0, keepdim=True).expand_as(z) if collapsing["on"] else z, labels)

    def step(self, *args, **kwargs):
        collapsing["on"] = self.step_count >= first_step
        return real_step(self, *args, **kwargs)
    models.Generator.forward, training.Training.step = forward, step


def coloured_shapes(folder: str, count: int = 600) -> None:
    """Discs and squares of six colours, in four sizes, anywhere on a grey-blue ground."""
    import numpy as np
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(0)
    colours = [(220, 60, 50), (240, 200, 40), (60, 170, 80), (50, 110, 220), (200, 80, 200), (250, 250, 250)]
    for i in range(count):
        image = Image.new("RGB", (32, 32), (70, 80, 100))
        draw = ImageDraw.Draw(image)
        r = int(rng.integers(5, 12))
        x, y = (int(v) for v in rng.integers(r, 32 - r, 2))
        box = (x - r, y - r, x + r, y + r)
        colour = colours[int(rng.integers(len(colours)))]
        (draw.ellipse if i % 2 else draw.rectangle)(box, fill=colour)
        image.save(os.path.join(folder, f"shape{i:04d}.png"))


def record(name: str) -> None:
    from core.train import main
    work = tempfile.mkdtemp(prefix=f"phase-{name}-")
    argv = [*COMMON, *RUNS[name], "--run-dir", os.path.join(work, "run")]
    if name == "collapse":
        one_latent_for_the_batch_from(COLLAPSE_AT_STEP)
    if name == "colour":
        os.makedirs(os.path.join(work, "shapes"))
        coloured_shapes(os.path.join(work, "shapes"))
        argv += ["--data-path", os.path.join(work, "shapes")]
    if main(argv) != 0:
        sys.exit(f"the {name} run did not finish: {work}")
    os.makedirs(OUT, exist_ok=True)
    shutil.copy(os.path.join(work, "run", "events.jsonl"), os.path.join(OUT, f"{name}.jsonl"))
    with open(os.path.join(OUT, f"{name}.jsonl")) as f:
        print(name, sum(1 for _ in f), "events")
    shutil.rmtree(work)


if __name__ == "__main__":
    names = sys.argv[1:] or list(RUNS)
    unknown = [name for name in names if name not in RUNS]
    if unknown:
        sys.exit(f"unknown run {unknown[0]!r}: one of {', '.join(RUNS)}")
    if len(names) == 1:
        record(names[0])
    else:   # a process each: the forced collapse patches the generator for the rest of its process
        for name in names:
            subprocess.run([sys.executable, __file__, name], check=True)
