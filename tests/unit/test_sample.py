"""The Sample tab and core.sample: determinism, interpolation, directions, neighbours, exports,
the refusal of unsafe generator files, and the named endpoints on a launched app."""
from __future__ import annotations

import io
import json
import os
import pickle
import re
import zipfile

import numpy as np
import pytest
from gradio_client.exceptions import AppError
import torch
from PIL import Image
from safetensors.torch import save_file

from core import sample as S
from core.images import gif_bytes, to_model_range, to_uint8
from core.models import Generator, GeneratorSpec, init_weights
from tests.filehelpers import cpu_plan, save_generator_pair, tiny_generator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "assets", "generator")


@pytest.fixture(scope="module")
def shipped():
    """The generator the app ships: trained on MNIST, so its directions have structure."""
    return S.load_run_generator(SHIPPED)


# ==== seeds ===================================================================================
def test_same_seed_same_images_and_independent_of_global_rng(shipped):
    generator, _ = shipped
    first = S.generate(generator, S.latents(5, 8, generator.z_dim))
    torch.manual_seed(1234)          # the global RNG must not matter: latents use their own
    torch.randn(1000)
    again = S.generate(generator, S.latents(5, 8, generator.z_dim))
    other = S.generate(generator, S.latents(6, 8, generator.z_dim))
    assert first.shape == (8, 1, 28, 28) and np.array_equal(first, again)
    assert np.abs(first - other).mean() > 0.05


# ==== interpolation ===========================================================================
def test_slerp_endpoints_are_the_seeds_latents_and_keeps_the_norm():
    z_dim = 100
    a, b = S.latents(1, 1, z_dim)[0], S.latents(2, 1, z_dim)[0]
    path = S.interpolation_latents(1, 2, 9, z_dim, "spherical")
    assert torch.allclose(path[0], a, atol=1e-5) and torch.allclose(path[-1], b, atol=1e-5)
    linear = S.interpolation_latents(1, 2, 9, z_dim, "linear")
    assert torch.allclose(linear[0], a) and torch.allclose(linear[-1], b)
    # Spherical keeps intermediate norms near the endpoints' (where N(0, I) puts its mass);
    # linear cuts a chord: ~1/sqrt(2) of the norm halfway between two random 100-d latents.
    expected = torch.linspace(float(a.norm()), float(b.norm()), 9)
    assert torch.allclose(path.norm(dim=1), expected, rtol=0.02)
    assert linear[4].norm() < 0.8 * path[4].norm()
    # Parallel vectors: slerp falls back to linear instead of dividing by sin(0).
    same = S.slerp(a[None].expand(3, -1), 2 * a[None].expand(3, -1), torch.tensor([0.0, 0.5, 1.0]))
    assert torch.isfinite(same).all() and torch.allclose(same[1], 1.5 * a, atol=1e-4)


def test_gif_has_every_frame_and_zip_has_every_sample(tmp_path):
    frames = [np.full((28, 28, 1), 20 * i, np.uint8) for i in range(7)]
    with Image.open(io.BytesIO(gif_bytes(frames, scale=4))) as gif:
        assert gif.n_frames == 7 and gif.size == (112, 112) and gif.info.get("loop") == 0
    images = np.random.default_rng(0).uniform(-1, 1, (5, 1, 28, 28)).astype(np.float32)
    with zipfile.ZipFile(S.write_samples_zip(images, str(tmp_path / "s.zip"), prefix="seed3")) as archive:
        names = archive.namelist()
        assert names == [f"seed3_{i:03d}.png" for i in range(5)]
        decoded = np.asarray(Image.open(io.BytesIO(archive.read(names[2]))))
    assert decoded.shape == (28, 28)
    assert np.array_equal(decoded, to_uint8(images)[2, ..., 0])   # lossless


def test_every_grey_level_survives_the_model_range_and_back():
    """Grids, downloads and the neighbour search all convert through core.images: one level off
    would show as a neighbour distance that is never 0 for a memorised image."""
    levels = torch.arange(256, dtype=torch.uint8).reshape(4, 1, 8, 8)
    model = to_model_range(levels)
    assert model.dtype == torch.float32 and model.min() == -1 and model.max() == 1
    assert np.array_equal(to_uint8(model.numpy()), levels.numpy().transpose(0, 2, 3, 1))


# ==== directions and truncation ===============================================================
def test_pca_directions_are_deterministic_and_move_the_image(shipped):
    generator, _ = shipped
    dirs, ratio = S.principal_directions(generator, k=5)
    again, _ = S.principal_directions(generator, k=5)
    assert dirs.shape == (5, generator.z_dim) and torch.allclose(dirs.norm(dim=1), torch.ones(5), atol=1e-5)
    # Same latents and seeded sketch; only threaded float sums may differ between calls.
    assert ((dirs * again).sum(1) > 0.99).all()
    assert (ratio[:-1] >= ratio[1:] - 1e-6).all() and ratio.sum() < 1
    z = S.latents(0, 1, generator.z_dim)
    base = S.generate(generator, z)
    moved = S.generate(generator, S.edit_latent(z, dirs, [3.0]))
    assert np.abs(moved - base).mean() > 0.03
    # PC1 is the direction of largest feature change: it must move the first block's features
    # more than typical random unit directions do.
    def feature_shift(d):
        return float((S.first_block_features(generator, z + 3 * d) - S.first_block_features(generator, z)).norm())
    rng = torch.Generator().manual_seed(0)
    random_dirs = torch.randn(20, generator.z_dim, generator=rng)
    random_dirs /= random_dirs.norm(dim=1, keepdim=True)
    assert feature_shift(dirs[0]) > np.median([feature_shift(d) for d in random_dirs])


def test_truncation_scales_the_latent(shipped):
    generator, _ = shipped
    z = S.latents(4, 3, generator.z_dim)
    dirs = torch.zeros(5, generator.z_dim)
    assert torch.equal(S.edit_latent(z, dirs, [0.0] * 5, psi=1.0), z)
    one_class = torch.full((3,), 4) if generator.classes else None
    at_mean = S.generate(generator, S.truncate(z, 0.0), one_class)
    assert np.abs(at_mean - at_mean[:1]).max() < 1e-6      # psi 0: every seed is the (class's) mean image
    assert torch.allclose(S.truncate(z, 0.5), z / 2)


# ==== nearest neighbours =====================================================================
def test_nearest_neighbours_finds_an_exact_training_image_and_agrees_with_brute_force(shipped):
    generator, _ = shipped
    pool, dataset = S.training_images(None, 28, 1)     # no run: the bundled MNIST
    assert dataset == "bundled-mnist" and pool.dtype == torch.uint8 and pool.shape[1:] == (1, 28, 28)
    query = pool[123].float().numpy() / 127.5 - 1
    idx, dist = S.nearest_neighbours(query, pool, 3, chunk=1000)   # several chunks on purpose
    assert idx[0] == 123 and dist[0] < 1e-4
    image = S.generate(generator, S.latents(0, 1, generator.z_dim))[0]
    idx, dist = S.nearest_neighbours(image, pool, 5, chunk=3000)
    brute = ((pool.flatten(1).float() / 127.5 - 1 - torch.as_tensor(image).flatten()) ** 2).sum(1).sqrt()
    assert list(idx) == brute.argsort()[:5].tolist()
    assert np.allclose(dist, brute.sort().values[:5].numpy(), rtol=1e-4)


# ==== refusing unsafe or broken generator files ================================================
class _Exploit:
    """Unpickling this would create a file: proof that a loader executed the pickle."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


PICKLE_REFUSED = re.escape("The weights file is a pickle / torch.save file, not safetensors. Blink never loads "
                           "pickles (unpickling can run code): export with safetensors.")


def test_pickle_disguised_as_safetensors_is_refused_without_running(tmp_path):
    generator = tiny_generator()
    weights, meta = save_generator_pair(str(tmp_path / "g"), generator)
    marker = tmp_path / "pwned"
    with open(weights, "wb") as f:
        pickle.dump({"net.0.weight": _Exploit(str(marker))}, f, protocol=4)
    with pytest.raises(S.GeneratorFileError, match=PICKLE_REFUSED):
        S.load_generator(weights, meta)
    assert not marker.exists()
    torch.save(generator.state_dict(), weights)             # torch.save's zip format
    with pytest.raises(S.GeneratorFileError, match=PICKLE_REFUSED):
        S.load_generator(weights, meta)
    with open(weights, "wb") as f:
        f.write(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    # The header check refuses it (read_weight_index), with safetensors' reason in brackets.
    with pytest.raises(S.GeneratorFileError, match=re.escape("The weights file is not a valid safetensors file (")):
        S.load_generator(weights, meta)


def test_a_safetensors_file_whose_header_length_begins_like_a_pickle_is_read_by_its_format(tmp_path):
    """The first byte of a safetensors file is its header length's lowest: 0x80, a pickle's first
    opcode, for one length in 256. Read by its format it is the generator's weights, not a pickle."""
    generator = tiny_generator()
    weights, meta = save_generator_pair(str(tmp_path / "g"), generator)
    state = {k: v.contiguous() for k, v in generator.state_dict().items()}
    for pad in range(0, 2048, 8):   # safetensors pads its header to 8 bytes: a length of k * 256 + 0x80 is one of these
        save_file(state, weights, metadata={"pad": "x" * pad})
        with open(weights, "rb") as f:
            if f.read(1) == b"\x80":
                break
    else:
        raise AssertionError("no header length ending in 0x80 was made")
    assert set(S.read_weight_index(weights)) == set(state)
    assert S.load_generator(weights, meta) is not None


@pytest.mark.parametrize("spec_change, message", [
    ({"width": 100_000}, "spec.width=100000"),
    ({"z_dim": 10**9}, "spec.z_dim"),
    ({"resolution": 4096}, "spec.resolution"),
    ({"width": 256, "resolution": 64}, "parameters"),      # in range per field, huge in total
    ({"width": True}, "whole number"),
    ({"z_dim": 16.5}, "whole number"),
])
def test_json_with_absurd_or_wrong_values_is_refused(tmp_path, spec_change, message):
    weights, meta = save_generator_pair(str(tmp_path / "g"), tiny_generator())
    with open(meta) as f:
        described = json.load(f)
    described["spec"].update(spec_change)
    with open(meta, "w") as f:
        json.dump(described, f)
    with pytest.raises(S.GeneratorFileError, match=message):
        S.load_generator(weights, meta)


def test_json_nested_past_the_decoders_depth_is_refused_in_plain_words(tmp_path):
    weights, meta = save_generator_pair(str(tmp_path / "g"), tiny_generator())
    with open(meta, "w") as f:
        f.write("[" * 100_000)                          # 100 KB: under the size limit, too deep to decode
    with pytest.raises(S.GeneratorFileError, match="generator.json is not a generator description") as refused:
        S.load_generator(weights, meta)
    assert "recursion" not in str(refused.value)


def test_mismatched_nan_or_oversized_weights_are_refused(tmp_path):
    weights, meta = save_generator_pair(str(tmp_path / "g"), tiny_generator(width=8))
    save_file(tiny_generator(width=16).state_dict(), weights)          # the JSON says width 8
    with pytest.raises(S.GeneratorFileError, match="do not match.*shape"):
        S.load_generator(weights, meta)
    state = tiny_generator(width=8).state_dict()
    save_file({**state, "extra.weight": torch.zeros(2)}, weights)
    with pytest.raises(S.GeneratorFileError, match="unexpected extra.weight"):
        S.load_generator(weights, meta)
    state["net.0.weight"][0, 0, 0, 0] = float("nan")
    save_file(state, weights)
    with pytest.raises(S.GeneratorFileError, match="NaN"):
        S.load_generator(weights, meta)
    with open(weights, "r+b") as f:                             # sparse: no 65 MB actually written
        f.truncate((S.MAX_WEIGHTS_MB + 1) * 2**20)
    with pytest.raises(S.GeneratorFileError, match="limit"):
        S.load_generator(weights, meta)


def test_cli_writes_a_truncated_grid_png(tmp_path):
    out = str(tmp_path / "grid.png")
    assert S.main(["--run", SHIPPED, "--n", "4", "--seed", "1", "--psi", "0.7", "--out", out]) == 0
    with Image.open(out) as img:
        assert img.size == (4 * 30 + 2, 32)
    assert S.main(["--run", SHIPPED, "--psi", "9", "--out", out]) == 2


def test_cli_writes_any_number_of_samples_in_chunks_as_one_batch_would(tmp_path, shipped, capsys):
    generator, _ = shipped
    many, few = str(tmp_path / "many.npy"), str(tmp_path / "few.npy")
    assert S.main(["--run", SHIPPED, "--n", "3000", "--seed", "5", "--out", many]) == 0
    assert S.main(["--run", SHIPPED, "--n", "64", "--seed", "5", "--out", few]) == 0
    images = np.load(many)
    assert images.shape == (3000, 1, 28, 28) and images.dtype == np.float32 and images.std() > 0.1
    np.testing.assert_allclose(images[:64], np.load(few), atol=1e-6)
    # Written S.SAMPLE_CHUNK at a time, yet sample i is what one batch of all 3,000 makes, whatever the chunks.
    assert len(images) > 2 * S.SAMPLE_CHUNK
    z, labels = S.latents(5, 3000, generator.z_dim), S.seed_labels(generator, 5, 3000)
    np.testing.assert_allclose(images[1000:1100], S.generate(generator, z[1000:1100], labels[1000:1100]), atol=1e-6)
    np.testing.assert_allclose(np.concatenate(list(S.sample_chunks(generator, 5, 3000, chunk=700))), images, atol=1e-6)
    # A zip past 1,000 samples numbers them with four digits, so its names sort in order.
    archive_path = str(tmp_path / "many.zip")
    assert S.main(["--run", SHIPPED, "--n", "1100", "--seed", "5", "--out", archive_path]) == 0
    with zipfile.ZipFile(archive_path) as archive:
        names = archive.namelist()
        assert names == sorted(names) == [f"seed5_{i:04d}.png" for i in range(1100)]
        last = np.asarray(Image.open(io.BytesIO(archive.read(names[-1]))))
    assert np.array_equal(last, to_uint8(images[1099:1100])[0, ..., 0])   # lossless
    # One grid image keeps its limit, and says what to write instead; --help says every limit.
    capsys.readouterr()
    assert S.main(["--run", SHIPPED, "--n", str(S.MAX_GRID_SAMPLES + 1), "--out", str(tmp_path / "g.png")]) == 2
    assert "1,024 for a .png grid (write a .npy or .zip for more)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        S.main(["--help"])
    assert "up to 1,000,000 into .npy or .zip" in " ".join(capsys.readouterr().out.split())


def test_cli_refuses_a_folder_it_cannot_write_and_a_npy_its_disk_cannot_hold(tmp_path, mount, capsys):
    assert S.main(["--run", SHIPPED, "--n", "4", "--out", str(tmp_path / "nowhere" / "x.npy")]) == 2
    assert "cannot write" in capsys.readouterr().err
    disk = mount("small", "size=1m")
    assert S.main(["--run", SHIPPED, "--n", "3000", "--out", os.path.join(disk, "many.npy")]) == 2
    assert "needs 9 MB and its disk has 1 MB free" in capsys.readouterr().err and os.listdir(disk) == []


def test_class_names_in_a_generator_description_are_one_per_class(tmp_path):
    generator = Generator(GeneratorSpec(16, 1, 28, 8, classes=3))
    for names in (["cat", "dog"], ["cat", "cat", "dog"], ["cat", "dog", 7], "cat dog eel"):
        weights, meta = save_generator_pair(str(tmp_path / "g"), generator, class_names=names)
        with pytest.raises(S.GeneratorFileError, match="class_names must be 3 different names"):
            S.load_generator(weights, meta)
    weights, meta = save_generator_pair(str(tmp_path / "g"), generator, class_names=["cat", "dog", "eel"])
    assert S.class_names(S.load_generator(weights, meta)[1]) == ["cat", "dog", "eel"]


def test_conditional_generator_seeds_pick_classes_and_interpolation_blends_them(tmp_path):
    torch.manual_seed(0)
    generator = Generator(GeneratorSpec(16, 1, 28, 8, classes=10))
    generator.apply(init_weights)
    generator.eval()
    assert S.seed_labels(generator, 7, 4).tolist() == [7, 8, 9, 0]
    assert S.seed_labels(tiny_generator(), 7, 4) is None and S.grid_columns(generator) == 10
    blend = S.blended_labels(generator, 3, 8, torch.linspace(0, 1, 5))
    assert blend[0].argmax() == 3 and blend[-1].argmax() == 8 and torch.allclose(blend.sum(1), torch.ones(5))
    assert blend[2, 3] == blend[2, 8] == 0.5
    # Saved and loaded, the class count survives; --label draws one class only.
    save_generator_pair(str(tmp_path), generator)
    loaded, _ = S.load_run_generator(str(tmp_path))
    assert loaded.classes == 10
    out = str(tmp_path / "sevens.npy")
    assert S.main(["--run", str(tmp_path), "--n", "3", "--seed", "1", "--label", "7", "--out", out]) == 0
    z = S.latents(1, 3, 16)
    np.testing.assert_allclose(np.load(out), S.generate(loaded, z, torch.full((3,), 7)), atol=1e-6)
    assert S.main(["--run", str(tmp_path), "--label", "10", "--out", out]) == 2
    save_generator_pair(str(tmp_path / "plain"), tiny_generator())
    assert S.main(["--run", str(tmp_path / "plain"), "--label", "1", "--out", out]) == 2   # unconditional


# ==== the launched app ========================================================================
@pytest.fixture(scope="module")
def app_client(tmp_path_factory):
    """A launched app whose current run has a generator and three grids (a run still training)."""
    from gradio_client import Client

    from app.job import Job
    from app.ui import DeviceCache, build_app
    from core import devices
    from core.config import TrainConfig
    from core.rundir import RunDir

    class CpuOnly(DeviceCache):
        """Skips the device probe subprocess (not what these tests are about)."""
        def get(self, requested="auto"):
            return devices.DeviceInfo(kind="cpu", name="CPU (test)")

    root = str(tmp_path_factory.mktemp("runs"))
    run = RunDir.create(cpu_plan(), root)
    generator = tiny_generator(width=8, z_dim=100)
    with torch.no_grad():   # an untrained net outputs ~0 (flat grey): give its images contrast
        generator.net[-1].weight.mul_(40)
    save_generator_pair(run.path, generator, step=300)
    for step in (100, 200, 300):
        run.save_grid(S.generate(generator, S.latents(step, 16, 100)), step)
    demo = build_app(job=Job(runs_root=root), device_cache=CpuOnly())
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        yield Client(url, verbose=False), run, generator
    finally:
        demo.close()


def _png(path):
    with Image.open(path) as img:
        return np.asarray(img.convert("L"))


def test_endpoints_sample_interpolate_gif_zip(app_client):
    client, run, generator = app_client
    image, caption = client.predict(3, 4, api_name="/sample")
    assert _png(image).shape == (32, 4 * 30 + 2) and "step 300" in caption
    expected = to_uint8(S.generate(generator, S.latents(3, 4, 100)))[0, ..., 0]
    assert np.array_equal(_png(image)[2:30, 2:30], expected)         # the seed's own image
    strip = client.predict(1, 2, 5, "spherical", api_name="/interpolate")
    assert _png(strip).shape == (32, 5 * 30 + 2)
    preview, gif = client.predict(1, 2, 5, "linear", api_name="/interpolation_gif")
    with Image.open(gif) as animation:
        assert animation.n_frames == 2 * 5 - 2                        # there and back
    with zipfile.ZipFile(client.predict(9, 12, api_name="/download_samples")) as archive:
        assert len(archive.namelist()) == 12 and archive.namelist()[0] == "seed9_000.png"


def test_endpoints_explore_neighbours_timelapse(app_client):
    client, run, _ = app_client
    plain, caption = client.predict(0, 1.0, 0, 0, 0, 0, 0, api_name="/explore")
    moved, _ = client.predict(0, 1.0, 4.0, 0, 0, 0, 0, api_name="/explore")
    assert "no direction moved" in caption and np.abs(_png(plain).astype(int) - _png(moved)).mean() > 1
    strip, caption = client.predict(0, 1.0, 4, 0, 0, 0, 0, 0, api_name="/neighbours")
    assert "4 nearest of 10,000" in caption and _png(strip).shape[1] > _png(strip).shape[0] * 4
    gif, slider, newest, caption = client.predict(api_name="/timelapse")
    with Image.open(gif) as animation:
        assert animation.n_frames == 3                                 # one frame per grid
        animation.seek(2)
        assert animation.info["duration"] == 1500                      # a pause on the newest
    assert slider["value"] == 300 and slider["minimum"] == 100 and "3 grids" in caption   # defaults to newest
    older, caption = client.predict(140, api_name="/grid_at")         # snaps to the nearest logged grid
    assert "step 100" in caption
    with Image.open(run.grids()[0][1]) as grid:
        assert np.array_equal(_png(older), np.asarray(grid.convert("L")))


def test_download_and_upload_generator(app_client, tmp_path):
    from gradio_client import handle_file
    client, run, _ = app_client
    files = client.predict(api_name="/download_generator")
    assert sorted(os.path.basename(f) for f in files) == ["generator.json", "generator.safetensors"]
    # A pickle posing as safetensors is refused with the reason; the run's generator stays.
    bad = str(tmp_path / "generator.safetensors")
    with open(bad, "wb") as f:
        pickle.dump({"x": 1}, f)
    with pytest.raises(AppError, match="The weights file is a pickle / torch.save file, not safetensors"):
        client.predict([handle_file(bad), handle_file(os.path.join(SHIPPED, "generator.json"))],
                       api_name="/upload_generator")
    # The shipped generator, uploaded, is used by the tab until switched back.
    message = client.predict([handle_file(os.path.join(SHIPPED, f)) for f in ("generator.safetensors", "generator.json")],
                             api_name="/upload_generator")
    with open(os.path.join(SHIPPED, "generator.json")) as f:
        shipped_step = json.load(f)["step"]
    assert "uploaded generator" in message
    _, caption = client.predict(0, 2, api_name="/sample")
    assert f"step {shipped_step}" in caption
    client.predict(api_name="/use_run_generator")
    _, caption = client.predict(0, 2, api_name="/sample")
    assert "step 300" in caption
