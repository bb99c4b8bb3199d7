"""Sampling from a trained generator: seeds, interpolation, directions, neighbours, exports.

Generators are loaded from `generator.safetensors` + `generator.json` (no pickle, so a shared file
cannot run code), every check of a file passed before any tensor is built. Latents are drawn on the
CPU from the seed, so a seed gives the same images on any device.

    python -m core.sample --run RUN_DIR --n 16 --seed 0 --out samples.npy
    python -m core.sample --run RUN_DIR --n 50000 --out fid.npy     # any N: written SAMPLE_CHUNK at a time
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import zipfile

import numpy as np
import torch

from core import models
# The generator description and its checks live in core/architecture.py: the UI reads them without torch.
from core.architecture import (MAX_WEIGHTS_MB, GeneratorFileError, GeneratorSpec, check_class, class_index,
                               class_names, read_spec)
from core.images import grid_image, png_bytes, to_model_range, to_uint8
from core.models import Generator
from core.rundir import generator_files, write_atomic

# The CLI's --n, made and written SAMPLE_CHUNK at a time; only the latents of all N sit in memory (drawn
# at once, so a sample is the same whatever N). A grid of more than MAX_GRID_SAMPLES is too fine to see.
MAX_SAMPLES = 1_000_000
MAX_GRID_SAMPLES = 1024
SAMPLE_CHUNK = 1024
MAX_PARAMETERS = 16_000_000   # an upload limit too: the described generator's size (its files': core.architecture)
WEIGHT_DTYPES = ("F32", "F16", "BF16")
DIRECTION_SAMPLES = 2000   # GANSpace uses ~1e4-1e6; 2,000 pin down the top 5 of a small DCGAN
PICKLE_OPCODE = 0x80       # protocol-2+ pickles (torch.save's legacy format) start with PROTO
MAX_POOL = 20_000          # training images searched for neighbours: 20k RGB 64x64 is ~250 MB
MISMATCH = "The weights do not match the described generator ({})."


# ==== loading, with every check before any tensor is built =====================================
def expected_shapes(spec: GeneratorSpec) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape, from a generator built on the meta device (no memory)."""
    with torch.device("meta"):
        model = Generator(spec)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def read_weight_index(weights_path: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every stored weight's (dtype, shape), from the file's header alone, once the file is neither
    too large nor a pickle in disguise."""
    from safetensors import SafetensorError, safe_open
    try:
        size = os.path.getsize(weights_path)
        if size > MAX_WEIGHTS_MB * 2**20:
            raise GeneratorFileError(f"The weights file is {size / 2**20:.1f} MB; the limit is {MAX_WEIGHTS_MB} MB.")
        with open(weights_path, "rb") as f:
            head = f.read(9)
        # A safetensors file by its format: an 8-byte little-endian header length, then the JSON header.
        # Its first byte is any length's lowest byte, so a pickle's opcode there says nothing alone.
        header_length = int.from_bytes(head[:8], "little") if len(head) == 9 else 0
        safetensors_like = 0 < header_length <= size - 8 and head[8:9] == b"{"
        # Sniffed only for the message: safetensors would refuse a pickle too, in less helpful words.
        if not safetensors_like and (head[:1] == bytes([PICKLE_OPCODE]) or head[:2] == b"PK"):
            raise GeneratorFileError("The weights file is a pickle / torch.save file, not safetensors. Blink never "
                                     "loads pickles (unpickling can run code): export with safetensors.")
        with safe_open(weights_path, "pt") as weights:
            return {name: (weights.get_slice(name).get_dtype(), tuple(weights.get_slice(name).get_shape()))
                    for name in weights.keys()}
    except OSError as exc:
        raise GeneratorFileError(f"The weights file cannot be read ({exc.strerror or exc}).")
    except SafetensorError as exc:
        raise GeneratorFileError(f"The weights file is not a valid safetensors file ({exc}).")


def check_weights_match(stored: dict[str, tuple[str, tuple[int, ...]]], spec: GeneratorSpec) -> None:
    """Strict match: the same names, the same shapes, floating-point dtypes only."""
    expected = expected_shapes(spec)
    odd = (("missing", sorted(set(expected) - set(stored))), ("unexpected", sorted(set(stored) - set(expected))))
    parts = [f"{kind} {', '.join(names[:3])}" + (" ..." if len(names) > 3 else "") for kind, names in odd if names]
    if parts:
        raise GeneratorFileError(MISMATCH.format("; ".join(parts)))
    for name, shape in expected.items():
        dtype, got = stored[name]
        if got != shape:
            raise GeneratorFileError(MISMATCH.format(f"{name}: shape {list(got)}, expected {list(shape)}"))
        if dtype not in WEIGHT_DTYPES and not name.endswith("num_batches_tracked"):
            raise GeneratorFileError(f"The weights file stores {name} as {dtype}; "
                                     f"expected one of {', '.join(WEIGHT_DTYPES)}.")


def load_generator(weights_path: str, meta_path: str, device: str = "cpu") -> tuple[Generator, dict]:
    """Rebuild a generator from its JSON description and load safetensors weights into it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    spec, meta = read_spec(meta_path)
    n_params = sum(int(np.prod(s)) for s in expected_shapes(spec).values())
    if n_params > MAX_PARAMETERS:
        raise GeneratorFileError(f"The described generator has {n_params:,} parameters; the limit is "
                                 f"{MAX_PARAMETERS:,} (Blink's largest has ~3.6M).")
    check_weights_match(read_weight_index(weights_path), spec)
    try:
        state = load_file(weights_path)
    except (OSError, SafetensorError, ValueError) as exc:
        raise GeneratorFileError(f"The weights file is not a valid safetensors file: {exc}")
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise GeneratorFileError(f"The weights contain NaN or infinite values ({bad[0]}).")
    generator = Generator(spec)
    try:
        generator.load_state_dict(state, strict=True)
    except RuntimeError as exc:   # dtype/shape problems the header check did not foresee
        raise GeneratorFileError(MISMATCH.format(str(exc).splitlines()[0]))
    generator = generator.to(device).eval()
    if torch.device(device).type == "cpu":   # oneDNN samples faster in NHWC
        generator.to(memory_format=torch.channels_last)
    return generator, meta


def load_run_generator(run_path: str, device: str = "cpu") -> tuple[Generator, dict]:
    weights, meta = generator_files(run_path)
    if not os.path.exists(weights):
        raise GeneratorFileError(f"No generator in {run_path} yet: it is saved at the first checkpoint.")
    return load_generator(weights, meta, device)


# ==== latents ==================================================================================
def latents(seed: int, n: int, z_dim: int) -> torch.Tensor:
    """n latent vectors from a seed, drawn on the CPU: identical on every device."""
    return torch.randn(n, z_dim, generator=torch.Generator().manual_seed(int(seed)))


def truncate(z: torch.Tensor, psi: float) -> torch.Tensor:
    """The truncation trick: the mean of N(0, I) latents is 0, so pulling toward it is z * psi."""
    return z * float(psi)


def seed_labels(generator: Generator, seed: int, n: int) -> torch.Tensor | None:
    """seed, seed+1, ... (mod the class count): seed 7 starts with a 7, and a grid as wide as a multiple
    of the class count has one class per column. None for an unconditional generator."""
    return (torch.arange(n) + int(seed)) % generator.classes if generator.classes else None


def grid_columns(generator: Generator, default: int = 8) -> int:
    """A whole number of columns a class (architecture.grid_columns): with seed_labels, a column a class."""
    return models.grid_columns(generator.classes, default)


def class_labels(generator: Generator, seed: int, n: int, label: int | None = None) -> torch.Tensor | None:
    """The classes of n samples: all of one class (label), or seed_labels' one class per column."""
    return seed_labels(generator, seed, n) if label is None else torch.full((n,), check_class(generator, label))


def blended_labels(generator: Generator, class_a: int, class_b: int, t: torch.Tensor) -> torch.Tensor | None:
    """Class weights moving from class_a to class_b along t (a 3 morphing into an 8); each taken mod the
    class count, so a seed stands for its own class (seed_labels)."""
    if not generator.classes:
        return None
    eye = torch.eye(generator.classes)
    a, b = eye[int(class_a) % generator.classes], eye[int(class_b) % generator.classes]
    return (1 - t[:, None]) * a + t[:, None] * b


@torch.no_grad()
def generate(generator: Generator, z: torch.Tensor, labels: torch.Tensor | None = None) -> np.ndarray:
    """Images (N, C, H, W) float32 in [-1, 1]; labels: classes or class weights (None: 0, 1, 2, ... in turn)."""
    device = next(generator.parameters()).device
    labels = None if labels is None else labels.to(device)
    return generator(z.to(device), labels).float().cpu().numpy()


def slerp(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation, row by row; falls back to linear for (near-)parallel vectors."""
    a_n, b_n = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    omega = torch.acos((a_n * b_n).sum(-1, keepdim=True).clamp(-1.0, 1.0))
    sin_omega = torch.sin(omega)
    t = t.reshape(-1, 1)
    linear = (1 - t) * a + t * b
    spherical = (torch.sin((1 - t) * omega) * a + torch.sin(t * omega) * b) / sin_omega.clamp_min(1e-7)
    return torch.where(sin_omega.abs() < 1e-6, linear, spherical)


def interpolation_latents(seed_a: int, seed_b: int, steps: int, z_dim: int, mode: str = "linear") -> torch.Tensor:
    """`steps` latents from seed_a's first vector to seed_b's, ends included."""
    a, b = latents(seed_a, 1, z_dim), latents(seed_b, 1, z_dim)
    t = torch.linspace(0, 1, steps)
    if mode == "spherical":
        return slerp(a.expand(steps, -1), b.expand(steps, -1), t)
    return (1 - t[:, None]) * a + t[:, None] * b


# ==== GANSpace-style directions ================================================================
@torch.no_grad()
def first_block_features(generator: Generator, z: torch.Tensor) -> torch.Tensor:
    """The first block's output (ConvT -> BN -> ReLU), flattened: (N, ch * start * start)."""
    device = next(generator.parameters()).device
    return generator.net[:3](generator.join_labels(z.to(device))).float().flatten(1).cpu()


@torch.no_grad()
def principal_directions(generator: Generator, k: int = 5, n: int = DIRECTION_SAMPLES,
                         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """GANSpace (Härkönen et al. 2020) for a net without a style space: PCA of the first block's
    features over n samples, then each component is expressed in latent space by regressing the
    latents on the PCA coordinates (their BigGAN recipe). Returns (directions (k, z_dim) of unit
    norm, explained variance ratio (k,)). Deterministic: fixed latents, seeded sketch, fixed signs."""
    z = latents(seed, n, generator.z_dim)
    features = first_block_features(generator, z)   # centred once, in place: a copy is as large
    features -= features.mean(0)
    # A seeded sketch in a forked RNG: the same directions every time, the caller's RNG left alone. Extra
    # components and power iterations sharpen the top k, an order of magnitude faster than an exact SVD.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _, s, v = torch.pca_lowrank(features, q=min(k + 10, *features.shape), center=False, niter=6)
    coords = features @ v[:, :k]                                                   # (n, k): PCA coordinates
    total = torch.linalg.vector_norm(features).square()
    ratio = s[:k].pow(2) / total
    # z ~ coords @ W: least squares gives the latent direction that moves along each component.
    weights = torch.linalg.lstsq(coords, z - z.mean(0)).solution                  # (k, z_dim)
    directions = weights / weights.norm(dim=1, keepdim=True).clamp_min(1e-12)
    # Eigenvectors have no sign; make it reproducible (largest latent entry positive).
    signs = torch.sign(directions.gather(1, directions.abs().argmax(1, keepdim=True)))
    return directions * signs, ratio


def edit_latent(z: torch.Tensor, directions: torch.Tensor, amounts, psi: float = 1.0) -> torch.Tensor:
    """Truncate z, then move it along unit directions: z ~ N(0, I), so an amount of 2 is two standard deviations."""
    amounts = torch.as_tensor(list(amounts), dtype=z.dtype)
    return truncate(z, psi) + amounts @ directions[: len(amounts)]


# ==== nearest real neighbours ==================================================================
def training_images(config, resolution: int, channels: int) -> tuple[torch.Tensor, str]:
    """The images to search for a generator's neighbours, uint8 (N, C, H, W) at its size, and their name.
    config: the TrainConfig the server wrote for the generator's run, or None (a generator's own metadata
    never names what is read). A folder is read only if it passes guard_path, else the bundled MNIST is
    searched. At most MAX_POOL images, a fixed subset."""
    from core import data
    dataset, path, max_mb = "bundled-mnist", "", data.DEFAULT_MAX_MB
    if config is not None and config.dataset != "folder":
        dataset, max_mb = config.dataset, config.max_image_mb      # read from the dataset cache; no path is used
    elif config is not None:
        max_mb = config.max_image_mb
        try:
            dataset, path = "folder", data.guard_path(config.data_path)
        except data.DatasetError:
            pass
    images = data.load(dataset, path, max_mb).images
    name = "own" if dataset == "folder" else dataset
    if len(images) > MAX_POOL:
        keep = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:MAX_POOL]
        images, name = images[keep.sort().values], f"{name} (a fixed {MAX_POOL:,} of {len(images):,})"
    if images.shape[1] != channels:   # e.g. a greyscale folder for an RGB model: compare in grey
        images = images.float().mean(1, keepdim=True).expand(-1, channels, -1, -1).round().to(torch.uint8)
    return data.resize(images, resolution), name


def nearest_neighbours(image: np.ndarray, pool: torch.Tensor, k: int, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Indices and pixel-L2 distances (in [-1, 1] units) of the k uint8 pool images closest to image.
    Chunked, so a large pool never becomes one big float copy (lab/README.md, "Soak")."""
    query = torch.as_tensor(image, dtype=torch.float32).flatten()
    best_d, best_i = torch.empty(0), torch.empty(0, dtype=torch.long)
    for start in range(0, len(pool), chunk):
        block = to_model_range(pool[start:start + chunk].flatten(1))
        d = block.sub_(query).square_().sum(1).sqrt_()   # in place on the chunk's own float copy (uint8 pool)
        best_d = torch.cat([best_d, d])
        best_i = torch.cat([best_i, torch.arange(start, start + len(block))])
        keep = best_d.topk(min(k, len(best_d)), largest=False).indices
        best_d, best_i = best_d[keep], best_i[keep]
    order = best_d.argsort()
    return best_i[order].numpy(), best_d[order].numpy()


# ==== exports ==================================================================================
def sample_chunks(generator: Generator, seed: int, n: int, psi: float = 1.0, label: int | None = None,
                  chunk: int = SAMPLE_CHUNK):
    """n samples of a seed, in float32 arrays of at most `chunk` images. Latents and classes are drawn
    for all n at once, so sample i is the same whatever n and the chunk size."""
    z = truncate(latents(seed, n, generator.z_dim), psi)
    labels = class_labels(generator, seed, n, label)
    for start in range(0, n, chunk):
        part = None if labels is None else labels[start:start + chunk]
        yield generate(generator, z[start:start + chunk], part).astype(np.float32, copy=False)


def write_npy_chunks(chunks, path: str, shape: tuple[int, ...]) -> str:
    """float32 arrays as one .npy file of `shape` (np.save's of their concatenation), a chunk at a time."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
              "shape": tuple(shape)}

    def write(f) -> None:
        np.lib.format.write_array_header_1_0(f, header)
        rows = 0
        for images in chunks:
            f.write(np.ascontiguousarray(images, dtype=np.float32).tobytes())
            rows += len(images)
        if rows != shape[0]:
            raise ValueError(f"{rows} samples written for a file of {shape[0]}")
    write_atomic(path, write)
    return path


def write_samples_zip(images, path: str, prefix: str = "sample", n: int | None = None) -> str:
    """(N, C, H, W) in [-1, 1], or chunks of them (n in all), -> a zip of PNG files prefix_000.png ...
    (with more digits past 1,000 samples, so the names sort in order)."""
    chunks = [images] if isinstance(images, np.ndarray) else images
    digits = max(3, len(str((len(images) if n is None else n) - 1)))

    def write(f) -> None:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:   # PNGs are compressed already
            i = 0
            for chunk in chunks:
                for pixels in to_uint8(chunk):
                    archive.writestr(f"{prefix}_{i:0{digits}d}.png", png_bytes(pixels))
                    i += 1
    write_atomic(path, write)     # a run stopped halfway leaves no zip without its directory
    return path


# ==== CLI ======================================================================================
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core.sample",
                                     description="Write N generated images as float32 (N, C, H, W) in [-1, 1].")
    parser.add_argument("--run", required=True, help="run directory with generator.safetensors")
    parser.add_argument("--n", type=int, default=64,
                        help=f"how many images (default 64): up to {MAX_SAMPLES:,} into .npy or .zip, made and "
                             f"written {SAMPLE_CHUNK:,} at a time; up to {MAX_GRID_SAMPLES:,} into a .png grid")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default=None,
                        help="class-conditional generators: draw only this class, by index or by the name the "
                             "generator gives it (a folder's class subfolders; a name wins over an index) "
                             "(default: seed, seed+1, ...)")
    parser.add_argument("--psi", type=float, default=1.0, help="truncation: z * psi (default 1: none)")
    parser.add_argument("--out", required=True, help="output .npy file (or .png for a grid, .zip for PNGs)")
    return parser


def _refused(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    grid = args.out.endswith(".png")
    most = MAX_GRID_SAMPLES if grid else MAX_SAMPLES
    if not 1 <= args.n <= most:
        more = " for a .png grid (write a .npy or .zip for more)" if grid and args.n > most else ""
        return _refused(f"--n must be between 1 and {most:,}{more}")
    if not 0.0 <= args.psi <= 2.0:
        return _refused("--psi must be between 0 and 2")
    try:
        generator, meta = load_run_generator(args.run)
    except GeneratorFileError as exc:
        return _refused(str(exc))
    try:
        label = None if args.label is None else class_index(generator, args.label, class_names(meta))
    except ValueError as exc:
        return _refused(f"--label: {exc}")
    shape = (args.n, generator.channels, generator.resolution, generator.resolution)
    out, npy = args.out, not grid and not args.out.endswith(".zip")
    if npy and not out.endswith(".npy"):
        out += ".npy"                     # as np.save names it
    chunks = sample_chunks(generator, args.seed, args.n, args.psi, label)
    try:
        if npy:   # its size is known: refused now rather than after generating what will not fit
            needed, free = int(np.prod(shape)) * 4, shutil.disk_usage(os.path.dirname(os.path.abspath(out))).free
            if needed > free:
                return _refused(f"{out} needs {needed / 2**20:,.0f} MB and its disk has {free / 2**20:,.0f} MB free: "
                                f"ask for fewer samples, or write it elsewhere")
            write_npy_chunks(chunks, out, shape)
        elif grid:
            images = np.concatenate(list(chunks))
            write_atomic(out, png_bytes(grid_image(images, columns=min(grid_columns(generator), args.n))))
        else:
            write_samples_zip(chunks, out, prefix=f"seed{args.seed}", n=args.n)
    except OSError as exc:   # a folder that is not there, a disk that fills up meanwhile
        return _refused(f"cannot write {out}: {exc.strerror or exc}")
    print(f"wrote {out}: {shape} from step {meta.get('step')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
