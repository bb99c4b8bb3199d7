"""The quality meters measure what they claim: real digits score as digits, noise does not.

Real MNIST test digits come from the IDX files in ../shared/data/mnist when present (the split
the classifier never saw); otherwise from the bundled subset (training digits, so only a
weaker check of the same code path).
"""
import gzip
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

from core import quality
from core.data import load_bundled_mnist
from tests.clihelpers import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T10K = os.path.join(os.path.dirname(ROOT), "shared", "data", "mnist")
# The weights are a build product of tools/train_classifier.py; without them only SWD is testable.
needs_classifier = pytest.mark.needs("classifier")


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


@pytest.fixture(scope="module")
def test_digits():
    """(images uint8 (N, 28, 28), labels, name): 2,000 held-out digits, or bundled ones."""
    images_path = os.path.join(T10K, "t10k-images-idx3-ubyte.gz")
    labels_path = os.path.join(T10K, "t10k-labels-idx1-ubyte.gz")
    try:
        images, labels = _read_idx(images_path), _read_idx(labels_path)
        return images[:2000], labels[:2000].astype(np.int64), "t10k"
    except (OSError, ValueError, IndexError):
        bundled = load_bundled_mnist()
        return bundled.images[::5, 0].numpy(), bundled.labels[::5].numpy(), "bundled"


@pytest.fixture(scope="module")
def meter():
    return quality.MnistMeter(load_bundled_mnist().images)


@needs_classifier
def test_classifier_is_small_loads_without_pickle_and_is_accurate(test_digits):
    assert os.path.getsize(quality.CLASSIFIER_WEIGHTS) < 1_000_000
    with open(quality.CLASSIFIER_WEIGHTS, "rb") as f:   # a safetensors header, not a pickle
        header_len = int.from_bytes(f.read(8), "little")
        assert json.loads(f.read(header_len))
    with open(os.path.join(quality.ASSETS, "mnist_classifier.json")) as f:
        info = json.load(f)
    assert info["test_accuracy"] >= 0.99, info
    images, labels, _ = test_digits
    net = quality.load_classifier()
    _, probs = quality.classify(net, images)
    assert (probs.argmax(1) == labels).mean() >= 0.985


@needs_classifier
def test_frechet_distance_real_vs_real_small_and_noise_large(meter, test_digits):
    images, _, _ = test_digits
    real = meter.score_samples(images[:1000])
    noise = meter.score_samples(np.random.default_rng(0).integers(0, 256, (1000, 28, 28), dtype=np.uint8))
    blank = meter.score_samples(np.zeros((1000, 28, 28), np.uint8))
    assert real["fd"] >= 0
    assert noise["fd"] > 50 * max(real["fd"], 0.1), (real, noise)
    assert blank["fd"] > 50 * max(real["fd"], 0.1), (real, blank)


@needs_classifier
def test_frechet_distance_matches_the_textbook_formula(meter):
    """The eigen-based trace equals tr(sqrtm(S1 S2)) computed the slow way."""
    rng = np.random.default_rng(1)
    feats = rng.normal(size=(500, quality.MnistNet.FEATURES)) * 0.5 + 0.1
    ref = meter.reference
    sigma = np.cov(feats, rowvar=False)
    w, v = np.linalg.eig(ref.sigma @ sigma)
    expected = (np.sum((ref.mu - feats.mean(0)) ** 2) + np.trace(ref.sigma) + np.trace(sigma)
                - 2 * np.sqrt(w.astype(complex)).real.sum())
    assert quality.frechet_distance(ref, feats) == pytest.approx(expected, rel=1e-6, abs=1e-6)


@needs_classifier
def test_confident_share_and_classes(meter, test_digits):
    images, _, _ = test_digits
    real = meter.score_samples(images[:1000])
    assert real["confident"] >= 0.95 and real["classes"] == 10
    assert quality.recognizable(real)
    noise = meter.score_samples(np.random.default_rng(0).integers(0, 256, (1000, 28, 28), dtype=np.uint8))
    # A CNN is over-confident on far out-of-distribution input (uniform noise: p > 0.9 for one
    # class), so 'confident' alone does not reject noise; the class count and fd do.
    assert noise["classes"] <= 2 and not quality.recognizable(noise) and noise["fd"] > 100 * real["fd"]
    ones = meter.score_samples(images[: 1000][_labels_of(test_digits)[:1000] == 1])
    assert ones["classes"] == 1 and not quality.recognizable(ones)   # mode collapse is caught


@needs_classifier
def test_the_spread_is_one_for_real_digits_and_falls_as_they_come_to_look_alike(meter, test_digits):
    images, _, _ = test_digits
    assert 0.9 < meter.score_samples(images[:1000])["spread"] < 1.1
    few = meter.score_samples(np.repeat(images[:10], 100, axis=0))["spread"]
    one = meter.score_samples(np.repeat(images[:1], 1000, axis=0))["spread"]
    assert one == 0.0 < few


@needs_classifier
def test_label_match_is_the_share_drawn_as_the_asked_class(meter, test_digits):
    """A conditional G is also judged on following its labels: real digits asked for their own
    class match ~always, asked for a shifted class almost never."""
    images, labels, _ = test_digits
    asked = torch.from_numpy(labels[:1000])
    assert meter.score_samples(images[:1000], asked)["label_match"] >= 0.97
    assert meter.score_samples(images[:1000], (asked + 1) % 10)["label_match"] <= 0.03
    assert "label_match" not in meter.score_samples(images[:1000])


def _labels_of(test_digits):
    return test_digits[1]


@needs_classifier
def test_module_score_samples_accepts_floats_and_64px(test_digits):
    images, _, _ = test_digits
    floats = images[:500].astype(np.float32) / 127.5 - 1
    big = torch.nn.functional.interpolate(torch.from_numpy(floats)[:, None], size=64, mode="bilinear")
    a, b = quality.score_samples(floats), quality.score_samples(big)
    assert a["confident"] > 0.9 and b["confident"] > 0.9


class _TableGenerator(nn.Module):
    """A 'generator' that returns real images by latent index: a known-perfect G."""

    def __init__(self, images: torch.Tensor):
        super().__init__()
        self.z_dim = 100
        self.images = images
        self.bn = nn.BatchNorm1d(1)
        self.seen_training = []

    def forward(self, z):
        self.seen_training.append(self.training)
        idx = (z.flatten(1)[:, 0].abs() * 1e4).long() % len(self.images)
        return self.images[idx]


@needs_classifier
def test_measure_restores_train_mode_and_is_deterministic(meter, test_digits):
    images, _, _ = test_digits
    G = _TableGenerator(torch.tensor(images).float()[:, None] / 127.5 - 1)
    G.train()
    first = meter.measure(G, torch.device("cpu"))
    assert G.training and G.seen_training and not any(G.seen_training)   # eval inside, train after
    second = meter.measure(G, torch.device("cpu"))
    assert first["fd"] == second["fd"]                                   # fixed latents
    assert quality.recognizable(first)
    # Its cost is a benchmark figure (bench/bench_speed.py), not a test: CI machines are shared.


class _ClassTableGenerator(nn.Module):
    """A known-perfect conditional G: for each asked digit, a real image of that digit
    (each digit's images in turn)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        super().__init__()
        self.z_dim, self.classes = 8, 10
        self.by_class = [images[labels == c] for c in range(10)]
        self.taken = [0] * 10

    def forward(self, z, y):
        out = []
        for c in y.tolist():
            pool = self.by_class[c]
            out.append(pool[self.taken[c] % len(pool)])
            self.taken[c] += 1
        return torch.stack(out)


@needs_classifier
def test_a_conditional_generator_is_asked_for_the_digits_in_the_real_sets_proportions():
    """Asked for each digit equally often, a perfect conditional G would score against the
    real set's class mix; asked in the set's proportions, it scores as the real digits do."""
    bundled = load_bundled_mnist()
    images, labels = bundled.images, bundled.labels
    # A set where ones are a quarter of the digits (MNIST's own mix is close to even).
    keep = (labels == 1) | (torch.arange(len(labels)) % 3 == 0)
    images, labels = images[keep], labels[keep]
    reference, pool = slice(0, None, 2), slice(1, None, 2)     # G draws from the other half
    meter = quality.MnistMeter(images[reference], real_labels=labels[reference], n_fake=2000)
    share = torch.bincount(meter.asked, minlength=10).float() / len(meter.asked)
    expected = torch.bincount(labels[reference], minlength=10).float() / len(labels[reference])
    assert (share - expected).abs().max() <= 1 / 2000 and share[1] > 0.2
    G = _ClassTableGenerator(images[pool].float() / 127.5 - 1, labels[pool])
    measured = meter.measure(G, torch.device("cpu"))
    assert measured["label_match"] > 0.97
    in_turn = torch.arange(2000) % 10
    each_equally = meter.score_samples(G(torch.zeros(2000, 8), in_turn), in_turn)
    assert measured["fd"] < each_equally["fd"] / 3, (measured["fd"], each_equally["fd"])


@needs_classifier
def test_for_dataset_picks_the_meter():
    bundled = load_bundled_mnist()
    assert isinstance(quality.for_dataset("bundled-mnist", bundled, 28), quality.MnistMeter)
    assert quality.meter_note("bundled-mnist") == ""   # its own meter: nothing said
    colour = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    assert isinstance(quality.for_dataset("cifar10", colour, 32), quality.SwdMeter)


def test_mnist_without_its_classifier_is_measured_by_swd_and_says_so(tmp_path):
    """The shipped classifier missing (a checkout without assets): the digits' run is measured by the
    patch distance, and the note the status and the page show says so and how to restore it."""
    bundled = load_bundled_mnist()
    missing = str(tmp_path / "no_classifier.safetensors")
    assert isinstance(quality.for_dataset("mnist", bundled, 28, classifier_path=missing), quality.SwdMeter)
    note = quality.meter_note("mnist", missing)
    assert "classifier" in note and "patch distance" in note and "tools/train_classifier.py" in note
    assert quality.meter_note("cifar10", missing) == ""   # its own meter is SWD: nothing to say


def test_swd_real_vs_real_small_and_noise_large():
    gen = torch.Generator().manual_seed(0)
    # Smooth colour images (blurred low-resolution noise) stand in for photos: structure at every scale.
    def smooth(n):
        low = torch.rand(n, 3, 8, 8, generator=gen)
        return torch.nn.functional.interpolate(low, size=32, mode="bicubic", align_corners=False).clamp(0, 1)
    real = (smooth(512) * 255).round().to(torch.uint8)
    meter = quality.SwdMeter(real[:256], 32)
    same = meter.score_samples(real[256:])
    noise = meter.score_samples(torch.rand(256, 3, 32, 32, generator=gen) * 2 - 1)
    flat = meter.score_samples(torch.zeros(256, 3, 32, 32) + torch.rand(256, 3, 1, 1, generator=gen) * 2 - 1)
    assert set(same) == {"swd", "swd_32px", "swd_16px", "spread"}
    assert noise["swd"] > 3 * same["swd"], (same, noise)
    # The spread: real images vary as real images do; one image repeated does not vary at all.
    assert 0.8 < same["spread"] < 1.2
    assert meter.score_samples(real[256:257].expand(256, -1, -1, -1))["spread"] == 0.0
    assert flat["swd"] > 3 * same["swd"], (same, flat)


def test_a_conditional_gs_spread_is_within_each_class_so_one_image_per_class_is_a_collapse():
    """Three classes of real images, each its own colour varying; fakes that are one image per
    class vary over all of them (the classes differ) but not within any class."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(512) % 3
    def images_of(classes):
        base = torch.eye(3)[classes][:, :, None, None] * 0.6
        low = base + 0.4 * torch.rand(len(classes), 3, 8, 8, generator=gen)
        return torch.nn.functional.interpolate(low, size=32, mode="bicubic", align_corners=False).clamp(0, 1)
    real = (images_of(labels) * 255).round().to(torch.uint8)
    meter = quality.SwdMeter(real, 32, real_labels=labels)
    asked = torch.arange(256) % 3
    assert 0.8 < meter.score_samples(images_of(asked) * 2 - 1, asked)["spread"] < 1.2
    one_each = (images_of(torch.arange(3)) * 2 - 1)[asked]
    assert meter.score_samples(one_each, asked)["spread"] == 0.0
    assert meter.score_samples(one_each)["spread"] > 0.35       # over all classes it looks varied


def test_a_folder_of_one_image_trains_through_its_quality_steps(tmp_path):
    """The SWD meter generates 256 images; a smaller real set must not break its comparison."""
    from PIL import Image
    folder = tmp_path / "one"
    folder.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "only.png")
    run_dir = tmp_path / "run"
    env = {**os.environ, "BLINK_DATA_DIR": str(tmp_path / "cache")}
    done = run_cli(["-m", "core.train", "--dataset", "folder", "--data-path", str(folder),
                    "--preset", "fast", "--batch-size", "1", "--steps", "4", "--log-every", "2", "--grid-every", "2",
                    "--quality-every", "2", "--checkpoint-every", "4", "--device", "cpu",
                    "--run-dir", str(run_dir)], env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(run_dir / "events.jsonl") as f:
        measured = [e for e in map(json.loads, f) if "quality_swd" in e]
    assert [e["step"] for e in measured] == [2, 4]
    assert all(np.isfinite(e["quality_swd"]) for e in measured)
