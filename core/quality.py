"""Sample-quality meters: a number per measurement that says whether the generator is getting better.

The trainer asks `for_dataset(name, imageset, resolution)` for a meter once, then calls
`meter.measure(G, device) -> {name: float}` every `quality_every` steps; the values land in
events.jsonl as `quality_<name>`. Neither meter needs a download:

- MNIST family: a small CNN trained on MNIST (assets/mnist_classifier.safetensors,
  tools/train_classifier.py). `fd`: the Frechet distance of its 64-d features of 1,024 generated and
  2,000 real digits (FID's recipe, lower is better); `confident`: the share it calls with p > 0.9;
  `classes`: digits making up at least 1% of those. `recognizable(values)` is the product's criterion.
- Anything else: the sliced Wasserstein distance of 7x7 patches of a Laplacian pyramid of generated
  and real images (ProGAN), per level and as the mean (`swd`, x1e3 as in the paper; lower is better).

`spread` (both meters): the samples' mean per-dimension standard deviation of features (the
classifier's, or the pixels at 8x8; within each class for a conditional G) over the real images':
about 1 when the fakes vary as real images do, near 0 at mode collapse (core/phase.py reads it).
Latents come once from a fixed CPU generator, so two measurements differ only because G changed.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.images import to_model_range

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
CLASSIFIER_WEIGHTS = os.path.join(ASSETS, "mnist_classifier.safetensors")

MNIST_FAMILY = ("bundled-mnist", "mnist")
CONFIDENT_P = 0.9          # a sample "is a digit" when the classifier gives one class p > 0.9
CLASS_MIN_SHARE = 0.01     # a digit "appears" when >= 1% of confident samples are that digit
# The product's promise: most samples read as digits, and no digit is missing.
RECOGNIZABLE = dict(confident=0.8, classes=10)

MEASURE_SEED = 1234        # latents and the real reference subset: fixed, independent of the run's seed


# ---- The MNIST classifier --------------------------------------------------------------
class MnistNet(nn.Module):
    """Three 3x3 conv blocks (16-32-64 channels) and a 64-d feature layer: ~60k parameters.

    Sized so that classifying 1,000 digits costs ~4 GFLOP, cheap enough inside training time
    (lab/README.md, "The quality curve"), while classifying MNIST's test split almost perfectly
    (assets/mnist_classifier.json); BatchNorm keeps the few epochs it trains stable.
    Input: (N, 1, 28, 28) in [-1, 1], the generator's range.
    """
    FEATURES = 64

    def __init__(self):
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.body = nn.Sequential(
            *block(1, 16), nn.MaxPool2d(2),       # 16 x 14 x 14
            *block(16, 32), nn.MaxPool2d(2),      # 32 x 7 x 7
            *block(32, 64), nn.MaxPool2d(2),      # 64 x 3 x 3
            nn.Flatten(), nn.Linear(64 * 9, self.FEATURES), nn.ReLU(inplace=True))
        self.head = nn.Linear(self.FEATURES, 10)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def load_classifier(path: str = CLASSIFIER_WEIGHTS) -> MnistNet:
    """The shipped classifier in eval mode, read from safetensors (no pickle)."""
    from safetensors.torch import load_file
    net = MnistNet()
    net.load_state_dict(load_file(path))
    # NHWC: oneDNN classifies faster so, and the meter runs inside training time (lab/README.md,
    # "The quality curve").
    return net.to(memory_format=torch.channels_last).eval()


def to_classifier_input(images) -> torch.Tensor:
    """uint8 [0, 255] or float [-1, 1] images, (N, 28, 28) or (N, 1, H, W) -> float (N, 1, 28, 28)."""
    # torch.tensor copies: numpy arrays read from files are often read-only.
    x = images.detach().cpu() if isinstance(images, torch.Tensor) else torch.tensor(np.asarray(images))
    x = to_model_range(x)
    if x.dim() == 3:
        x = x[:, None]
    if x.shape[1] == 3:                      # an RGB render of a digit: the classifier is greyscale
        x = x.mean(1, keepdim=True)
    if x.shape[-1] != 28 or x.shape[-2] != 28:   # e.g. the dcgan64 preset trains MNIST at 64x64
        x = F.interpolate(x, size=(28, 28), mode="bilinear", antialias=True, align_corners=False)
    return x.clamp(-1.0, 1.0)


@torch.no_grad()
def classify(net: MnistNet, images, batch: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(features (N, 64) float64, probabilities (N, 10) float64)."""
    x = to_classifier_input(images)
    feats, probs = [], []
    for chunk in x.split(batch):
        f = net.features(chunk)
        feats.append(f)
        probs.append(torch.softmax(net.head(f), dim=1))
    return torch.cat(feats).double().numpy(), torch.cat(probs).double().numpy()


# ---- Frechet distance ------------------------------------------------------------------
class Gaussian:
    """Mean and covariance of a feature set, with the symmetric square root of the covariance
    cached: the reference side's root is computed once, so each measurement needs only one
    eigendecomposition of a 64x64 matrix (no scipy.linalg.sqrtm)."""

    def __init__(self, features: np.ndarray):
        self.mu = features.mean(0)
        self.sigma = np.cov(features, rowvar=False)
        w, v = np.linalg.eigh(self.sigma)
        self.sqrt_sigma = (v * np.sqrt(np.clip(w, 0, None))) @ v.T


def frechet_distance(ref: Gaussian, features: np.ndarray) -> float:
    """||mu1 - mu2||^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2): the FID formula.

    tr((S1 S2)^1/2) equals tr((S1^1/2 S2 S1^1/2)^1/2), and the latter is symmetric PSD, so
    its eigenvalues are real and non-negative (clipped against round-off).
    """
    mu = features.mean(0)
    sigma = np.cov(features, rowvar=False)
    inner = ref.sqrt_sigma @ sigma @ ref.sqrt_sigma
    eig = np.linalg.eigvalsh((inner + inner.T) / 2)
    covmean_trace = np.sqrt(np.clip(eig, 0, None)).sum()
    diff = ref.mu - mu
    return float(diff @ diff + np.trace(ref.sigma) + np.trace(sigma) - 2.0 * covmean_trace)


def _digit_scores(probs: np.ndarray) -> dict[str, float]:
    top = probs.max(1)
    confident = top > CONFIDENT_P
    labels = probs.argmax(1)[confident]
    counts = np.bincount(labels, minlength=10)
    classes = int((counts >= max(1, CLASS_MIN_SHARE * confident.sum())).sum()) if confident.any() else 0
    return {"confident": float(confident.mean()), "classes": float(classes)}


def recognizable(values: dict) -> bool:
    """The 'digits have appeared' criterion: >= 80% confident samples and all ten digits."""
    return (values.get("confident", 0.0) >= RECOGNIZABLE["confident"]
            and values.get("classes", 0.0) >= RECOGNIZABLE["classes"])


def spread(features: torch.Tensor | np.ndarray, real_std: np.ndarray) -> float:
    """The samples' per-dimension standard deviation over the real images', averaged over the
    dimensions where the real images vary at all."""
    std = np.asarray(features, dtype=np.float64).reshape(len(features), -1).std(0)
    varied = real_std > 1e-6
    return float((std[varied] / real_std[varied]).mean()) if varied.any() else 0.0


def spread_within_classes(features, labels: torch.Tensor, real_std_by_class: dict) -> float:
    """`spread` of each class's samples against the real images of that class, averaged over the
    classes: a conditional G that draws one image per class has collapsed, though its classes
    still differ from each other (and so its samples' spread over all of them stays high)."""
    features, labels = np.asarray(features), np.asarray(labels)
    shares = [spread(features[labels == c], std) for c, std in real_std_by_class.items() if (labels == c).sum() > 1]
    return float(np.mean(shares)) if shares else 0.0


def std_by_class(features, labels) -> dict:
    """Each class's per-dimension standard deviation (classes with two images or more)."""
    features, labels = np.asarray(features), np.asarray(labels)
    return {int(c): features[labels == c].std(0) for c in np.unique(labels) if (labels == c).sum() > 1}


def _spread_pixels(images: torch.Tensor) -> torch.Tensor:
    """Images at 8x8: their layout and colours, without the detail that noise also varies in."""
    return F.adaptive_avg_pool2d(images.float(), 8).flatten(1)


# ---- Meters ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)   # drawn once per meter size and z_dim: every measurement uses the same
def _fixed_latents(n: int, z_dim: int) -> torch.Tensor:
    return torch.randn(n, z_dim, 1, 1, generator=torch.Generator().manual_seed(MEASURE_SEED))


def _reference_subset(images: torch.Tensor, n: int) -> torch.Tensor:
    """n real images chosen by a fixed seed (the whole set if it is smaller)."""
    if len(images) <= n:
        return images
    idx = torch.randperm(len(images), generator=torch.Generator().manual_seed(MEASURE_SEED))[:n]
    return images[idx.sort().values]


@torch.no_grad()
def generate(G: nn.Module, latents: torch.Tensor, device, batch: int | None = None,
             labels: torch.Tensor | None = None) -> torch.Tensor:
    """Samples from G in eval mode (running BatchNorm statistics, as the app's grids use),
    under no_grad; G's train/eval mode is restored afterwards. Returns float CPU (N, C, H, W).
    labels: the classes a conditional G is asked for (default: sample_labels).

    On XLA devices batches of 64, the fixed-noise grid's shape: every new shape is a new graph
    compilation there, and this one is compiled for the grid already (fp32)."""
    if batch is None:
        batch = 64 if torch.device(device).type == "xla" else 512
    if labels is None:
        labels = sample_labels(G, len(latents))
    was_training = G.training
    G.eval()
    try:
        if labels is None:
            out = [G(z.to(device)).float().cpu() for z in latents.split(batch)]
        else:
            out = [G(z.to(device), y.to(device)).float().cpu()
                   for z, y in zip(latents.split(batch), labels.split(batch))]
    finally:
        G.train(was_training)
    return torch.cat(out)


def proportional_labels(labels: torch.Tensor, n: int) -> torch.Tensor:
    """n labels, each class as often as in `labels` (largest remainders), classes in order.

    Exact counts, not a random draw: with 1,024 samples a draw's class counts vary by ~10%,
    which the Frechet distance counts as a difference between the sets."""
    counts = torch.bincount(labels.long().flatten())
    quota = counts.double() * n / counts.sum()
    whole = quota.floor().long()
    left = n - int(whole.sum())
    whole[torch.argsort(quota - whole, descending=True)[:left]] += 1
    return torch.repeat_interleave(torch.arange(len(counts)), whole)


def sample_labels(G: nn.Module, n: int) -> torch.Tensor | None:
    """The classes the meter asks a class-conditional G for (0, 1, ..., 9, 0, ...); None otherwise."""
    from core.models import default_labels
    classes = getattr(G, "classes", 0)
    return default_labels(n, classes) if classes else None


class Meter:
    """What both meters share: n_fake samples of G from fixed latents, scored by score_samples."""

    def asked_labels(self, G: nn.Module) -> torch.Tensor | None:
        """The classes a conditional G is asked for (0, 1, ..., 9, 0, ...); None for an unconditional G."""
        return sample_labels(G, self.n_fake)

    def measure(self, G: nn.Module, device) -> dict[str, float]:
        t0 = time.perf_counter()
        asked = self.asked_labels(G)
        values = self.score_samples(generate(G, _fixed_latents(self.n_fake, G.z_dim), device, labels=asked), asked)
        values["seconds"] = time.perf_counter() - t0   # the meter's own cost, shown beside its values
        return values


class MnistMeter(Meter):
    """Classifier-based meter for digits: fd, confident, classes (see the module docstring)."""

    def __init__(self, real_images, n_real: int = 2000, n_fake: int = 1024,
                 classifier_path: str = CLASSIFIER_WEIGHTS, real_labels=None):
        # The classifier runs on the CPU: it is cheap there, and it keeps the meter off the
        # accelerator's graph (no XLA recompilation for a differently shaped batch).
        self.net = load_classifier(classifier_path)
        self.n_fake = n_fake
        # A conditional G is asked for the digits in the proportions of the real digits it is
        # compared with: equal shares would be scored as a mismatch even for real digits
        # (lab/README.md, "The quality ceiling, measured with a meter that can see it").
        self.asked = None if real_labels is None else proportional_labels(
            _reference_subset(torch.as_tensor(real_labels), n_real), n_fake)
        real = _reference_subset(torch.as_tensor(real_images), n_real)
        features, _ = classify(self.net, real)
        self.reference = Gaussian(features)
        self.real_std = features.std(0)

    def asked_labels(self, G: nn.Module) -> torch.Tensor | None:
        """The real set's proportions where the meter has its labels, else each digit in turn."""
        if getattr(G, "classes", 0) and self.asked is not None:
            return self.asked
        return super().asked_labels(G)

    def score_samples(self, images, asked: torch.Tensor | None = None) -> dict[str, float]:
        """fd / confident / classes; with `asked` (the classes a conditional G was given) also
        label_match: the share of samples the classifier calls as the class that was asked for."""
        features, probs = classify(self.net, images)
        values = {"fd": frechet_distance(self.reference, features), **_digit_scores(probs),
                  "spread": spread(features, self.real_std)}
        if asked is not None:
            values["label_match"] = float((probs.argmax(1) == asked.numpy()).mean())
        return values


# ---- sliced Wasserstein distance over Laplacian pyramid patches (ProGAN) -------------------
def _gaussian_kernel(channels: int) -> torch.Tensor:
    k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0
    k2 = torch.outer(k, k)
    return k2.expand(channels, 1, 5, 5).contiguous()


def _pyr_down(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), kernel, stride=2, groups=x.shape[1])


def _pyr_up(x: torch.Tensor, kernel: torch.Tensor, size) -> torch.Tensor:
    up = torch.zeros(x.shape[0], x.shape[1], size[0], size[1], dtype=x.dtype)
    up[:, :, ::2, ::2] = x * 4.0
    return F.conv2d(F.pad(up, (2, 2, 2, 2), mode="reflect"), kernel, groups=x.shape[1])


def laplacian_pyramid(x: torch.Tensor, levels: int) -> list[torch.Tensor]:
    """Finest band first, the low-pass residual last (levels entries in all)."""
    kernel = _gaussian_kernel(x.shape[1])
    out = []
    for _ in range(levels - 1):
        down = _pyr_down(x, kernel)
        out.append(x - _pyr_up(down, kernel, x.shape[-2:]))
        x = down
    out.append(x)
    return out


def _patches(level: torch.Tensor, per_image: int, generator: torch.Generator, size: int = 7) -> torch.Tensor:
    """per_image random size x size patches per image, flattened: (N * per_image, C * size^2)."""
    n, c, h, w = level.shape
    ys = torch.randint(0, h - size + 1, (n, per_image), generator=generator)
    xs = torch.randint(0, w - size + 1, (n, per_image), generator=generator)
    offsets = torch.arange(size)
    rows = (ys[..., None] + offsets)[..., :, None].expand(n, per_image, size, size)
    cols = (xs[..., None] + offsets)[..., None, :].expand(n, per_image, size, size)
    img = torch.arange(n)[:, None, None, None].expand(n, per_image, size, size)
    patches = level.permute(0, 2, 3, 1)[img, rows, cols]     # (n, per_image, size, size, c)
    return patches.permute(0, 1, 4, 2, 3).reshape(n * per_image, c * size * size)


def _normalise(desc: torch.Tensor) -> torch.Tensor:
    """ProGAN: each descriptor set is standardised per channel-position before comparison."""
    return (desc - desc.mean(0, keepdim=True)) / desc.std(0, keepdim=True).clamp_min(1e-8)


def sliced_wasserstein(a: torch.Tensor, b: torch.Tensor, directions: torch.Tensor) -> float:
    """Mean over random unit directions of the 1-D Wasserstein-1 distance of the projections."""
    # Sorting along the last (contiguous) dimension is faster than along dim 0 on CPU.
    pa = torch.sort((directions.T @ a.T), dim=1).values
    pb = torch.sort((directions.T @ b.T), dim=1).values
    return float((pa - pb).abs().mean())


class SwdMeter(Meter):
    """Sliced Wasserstein distance over Laplacian pyramid 7x7 patches, per level and mean (x1e3)."""

    def __init__(self, real_images, resolution: int, n_images: int = 256, patches_per_image: int = 32,
                 n_directions: int = 128, real_labels=None):
        self.n_images = self.n_fake = n_images
        self.per_image = patches_per_image
        self.resolution = resolution
        # Levels down to 16x16 (ProGAN stops at 16 px): 64 px -> 3 bands, 28/32 px -> 2.
        self.levels = max(1, int(np.log2(resolution / 16)) + 1)
        real = _reference_subset(torch.as_tensor(real_images), n_images)
        real = to_model_range(real)
        if real.shape[-1] != resolution:
            real = F.interpolate(real, size=(resolution, resolution), mode="bilinear", antialias=True,
                                 align_corners=False)
        self.channels = real.shape[1]
        gen = torch.Generator().manual_seed(MEASURE_SEED)
        dim = self.channels * 49
        dirs = torch.randn(dim, n_directions, generator=gen)
        self.directions = dirs / dirs.norm(dim=0, keepdim=True)
        self.real_desc = self._descriptors(real)
        pixels = _spread_pixels(real).numpy()
        self.real_std = pixels.std(0)
        # A conditional G's spread is measured within each class (a folder's class subfolders).
        self.real_std_by_class = {} if real_labels is None else std_by_class(
            pixels, _reference_subset(torch.as_tensor(real_labels), n_images))

    def _descriptors(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Always n_images * patches_per_image descriptors per level, whatever len(images) is.

        The sort-based distance compares two sets of equal size, and a user's folder may hold
        fewer real images than the meter generates (even one): a smaller set gives more patches
        per image instead. A full-sized set takes the same patches as always."""
        count = self.n_images * self.per_image
        per_image = -(-count // len(images))
        # The same patch positions for real and generated sets (a fixed generator per call).
        gen = torch.Generator().manual_seed(MEASURE_SEED + 1)
        return [_normalise(_patches(level, per_image, gen)[:count])
                for level in laplacian_pyramid(images.float(), self.levels)]

    def score_samples(self, images, labels: torch.Tensor | None = None) -> dict[str, float]:
        """labels: the classes a conditional G was asked for (its spread is then within classes)."""
        x = images if isinstance(images, torch.Tensor) else torch.tensor(np.asarray(images))
        x = to_model_range(x)
        desc = self._descriptors(x[: self.n_images])
        per_level = [1e3 * sliced_wasserstein(r, d, self.directions) for r, d in zip(self.real_desc, desc)]
        values = {f"swd_{self.resolution >> i}px": v for i, v in enumerate(per_level)}
        values["swd"] = float(np.mean(per_level))
        pixels = _spread_pixels(x[: self.n_images])
        values["spread"] = (spread_within_classes(pixels, labels[: self.n_images], self.real_std_by_class)
                            if labels is not None and self.real_std_by_class else spread(pixels, self.real_std))
        return values


def meter_note(dataset_name: str, classifier_path: str = CLASSIFIER_WEIGHTS) -> str:
    """Why a run of this dataset is measured by another meter than its own ('' when it is not): the
    page and the status say it, so a class comparing runs knows its curve is not the digits' one."""
    if dataset_name in MNIST_FAMILY and not os.path.exists(classifier_path):
        return ("The digit classifier (assets/mnist_classifier.safetensors) is missing, so quality is measured "
                "as the patch distance, not the digits' Frechet distance: run tools/train_classifier.py to restore it.")
    return ""


def for_dataset(dataset_name: str, imageset, resolution: int, classifier_path: str = CLASSIFIER_WEIGHTS):
    """The meter for a dataset: the digit classifier for MNIST (SWD, said by meter_note, where the
    classifier is missing), SWD for everything else.

    imageset is a core.data.ImageSet (uint8 images at native size); resolution is the model's.
    """
    images = imageset.images if hasattr(imageset, "images") else imageset
    if dataset_name in MNIST_FAMILY and not meter_note(dataset_name, classifier_path):
        return MnistMeter(images, classifier_path=classifier_path, real_labels=getattr(imageset, "labels", None))
    return SwdMeter(images, resolution, real_labels=getattr(imageset, "labels", None))


# ---- offline use (benchmarks, notebooks) ---------------------------------------------------
_DEFAULT_MNIST_METER: MnistMeter | None = None


def default_mnist_meter() -> MnistMeter:
    """A meter against the bundled MNIST subset, built on first use (no import-time work)."""
    global _DEFAULT_MNIST_METER
    if _DEFAULT_MNIST_METER is None:
        from core.data import load_bundled_mnist
        bundled = load_bundled_mnist()
        _DEFAULT_MNIST_METER = MnistMeter(bundled.images, real_labels=bundled.labels)
    return _DEFAULT_MNIST_METER


def score_samples(images_np) -> dict[str, float]:
    """fd / confident / classes of digit images (uint8 [0,255] or float [-1,1]) vs bundled MNIST."""
    return default_mnist_meter().score_samples(images_np)
