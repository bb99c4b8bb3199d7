"""The GAN loss family (core/losses.py) checked against hand-computed values, an autograd
reference, XLA:CPU, and the real trainer.

The gradient penalty gets the most attention because its known bugs (alpha per pixel, one norm
over the whole batch, a BatchNorm critic) all train without crashing and just train worse.
"""
import math
import os

import pytest
import torch
from torch import nn

from core import devices, gans, losses, models, runtime
from core.config import TrainConfig, validate
from core.rundir import RunDir
from core.train import train
from tests.filehelpers import cpu_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """These nets are too small to gain from intra-op threads, and on a shared 2-core box the
    OpenMP workers spin-wait on each other: 5 WGAN-GP steps took 24 s with 2 threads under
    load versus 3.5 s with 1 (measured). One thread keeps the file's time predictable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- tiny critics whose input-gradients are known in closed form -----------------------------
class LinearCritic(nn.Module):
    """D(x) = <w, x>: its input-gradient is w for every sample, so GP = (||w|| - 1)^2 exactly."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x):
        return x.flatten(1) @ self.w.flatten()


class QuadraticCritic(nn.Module):
    """D(x) = ||x||^2 / 2: its input-gradient is x itself, so each sample has its own norm."""

    def forward(self, x):
        return 0.5 * x.flatten(1).pow(2).sum(1)


class RecordingCritic(LinearCritic):
    """A linear critic that keeps the last input it saw (the interpolated x_hat)."""

    def forward(self, x):
        self.seen = x.detach().clone()
        return super().forward(x)


def _pair(batch=4, shape=(1, 28, 28), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, *shape, generator=g) * 2 - 1, torch.rand(batch, *shape, generator=g) * 2 - 1


# ---- gradient penalty: hand-computed cases ------------------------------------------------------
def test_gp_of_linear_critic_is_norm_of_w_minus_one_squared():
    w = torch.randn(1, 28, 28, generator=torch.Generator().manual_seed(1))
    w = 3.0 * w / w.norm()                      # ||w|| = 3  ->  GP = (3 - 1)^2 = 4
    real, fake = _pair()
    gp = losses.gradient_penalty(LinearCritic(w), real, fake)
    assert gp.item() == pytest.approx(4.0, rel=1e-5)
    # ||w|| = 1 is exactly the 1-Lipschitz target: no penalty.
    assert losses.gradient_penalty(LinearCritic(w / 3), real, fake).item() == pytest.approx(0.0, abs=1e-9)


def test_gp_takes_one_gradient_norm_per_sample():
    # real == fake makes x_hat = real whatever alpha is, so the per-sample norms are chosen here:
    # sample 0 has norm 1, sample 1 norm 3.
    x = torch.zeros(2, 1, 4, 4)
    x[0, 0, 0, 0] = 1.0
    x[1, 0, 0, 0] = 3.0
    gp = losses.gradient_penalty(QuadraticCritic(), x, x).item()
    per_sample = ((1 - 1) ** 2 + (3 - 1) ** 2) / 2                   # 2.0: the right answer
    one_norm_for_batch = (math.sqrt(1 ** 2 + 3 ** 2) - 1) ** 2       # 4.675: the classic bug
    mean_norm_first = ((1 + 3) / 2 - 1) ** 2                          # 1.0: another wrong order
    assert gp == pytest.approx(per_sample, rel=1e-6)
    assert abs(gp - one_norm_for_batch) > 1 and abs(gp - mean_norm_first) > 0.5


def test_gp_interpolates_with_one_alpha_per_sample():
    critic = RecordingCritic(torch.ones(1, 8, 8))
    real, fake = _pair(batch=6, shape=(1, 8, 8), seed=2)
    losses.gradient_penalty(critic, real, fake)
    # x_hat = a*real + (1-a)*fake; solve for a at every pixel: one value per sample means alpha
    # has shape (B,1,1,1), a spread within a sample means it was drawn per pixel (PyTorch-GAN d2977bc).
    a = ((critic.seen - fake) / (real - fake)).flatten(1)
    assert torch.allclose(a, a[:, :1].expand_as(a), atol=1e-4)
    assert ((a >= 0) & (a <= 1)).all()
    assert a[:, 0].unique().numel() == 6                              # a fresh draw per sample


def test_gp_matches_jacobian_reference_on_the_wgan_critic():
    """The shipped WGAN-GP critic: penalty and its parameter gradients (the double backward)
    against per-sample gradients read off torch.autograd.functional.jacobian."""
    torch.manual_seed(0)
    _, D = models.build(gans.get("wgan-gp"), "fast", 1, 28, 100)
    real, fake = _pair(batch=3)
    alpha = torch.tensor([0.1, 0.5, 0.9]).view(3, 1, 1, 1)

    params = list(D.parameters())

    def grads_of(value):
        # The last layer's bias shifts every score equally, so no input-gradient depends on it.
        found = torch.autograd.grad(value, params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(params, found)]

    gp = losses.gradient_penalty(D, real, fake, alpha=alpha)
    grads = grads_of(gp)

    x_hat = alpha * real + (1 - alpha) * fake
    jac = torch.autograd.functional.jacobian(D, x_hat, create_graph=True)   # (B, B, 1, 28, 28)
    per_sample = torch.stack([jac[i, i] for i in range(3)]).flatten(1)
    off_diagonal = jac.flatten(2).norm(dim=2) * (1 - torch.eye(3))
    assert off_diagonal.max().item() == 0.0     # GroupNorm: no sample sees another's statistics
    reference = (per_sample.norm(dim=1) - 1).pow(2).mean()
    ref_grads = grads_of(reference)

    assert gp.item() == pytest.approx(reference.item(), rel=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_gp_refuses_a_batchnorm_critic():
    _, D = models.build(gans.get("dcgan"), "fast", 1, 28, 100)
    real, fake = _pair(batch=3)
    # Why: with batch statistics, one sample's score depends on the others' inputs.
    jac = torch.autograd.functional.jacobian(D, real)
    assert jac[0, 1].abs().max().item() > 0
    with pytest.raises(ValueError, match="BatchNorm"):
        losses.gradient_penalty(D, real, fake)


def test_critic_normalisation_per_gan():
    def kinds(D):
        return {type(m).__name__ for m in D.modules()}

    _, D = models.build(gans.get("wgan-gp"), "fast", 1, 28, 100)
    assert "GroupNorm" in kinds(D) and not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in D.modules())
    assert all(m.num_groups == 1 for m in D.modules() if isinstance(m, nn.GroupNorm))   # layer norm
    _, D = models.build(gans.get("hinge"), "fast", 1, 28, 100)
    convs = [m for m in D.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(nn.utils.parametrize.is_parametrized(m, "weight") for m in convs)   # SN everywhere
    assert not {"GroupNorm", "FP32BatchNorm2d"} & kinds(D)
    _, D = models.build(gans.get("dcgan"), "fast", 1, 28, 100)
    assert "FP32BatchNorm2d" in kinds(D)


# ---- the three losses on hand-computed inputs -----------------------------------------------
class MeanCritic(nn.Module):
    """D(x) = mean of x's pixels: a constant image of value v scores exactly v."""

    def forward(self, x):
        return x.flatten(1).mean(1)


def _const(*values, size=(1, 4, 4)):
    return torch.stack([torch.full(size, float(v)) for v in values])


def test_loss_values_by_hand():
    D, real, fake = MeanCritic(), _const(2.0, 0.5), _const(-0.5, -3.0)   # real scores 2, .5; fake -.5, -3
    sig, log = torch.sigmoid, math.log

    loss, stats = losses.NonSaturating().discriminator_loss(D, real, fake)
    want = (-log(sig(torch.tensor(2.0))) - log(sig(torch.tensor(0.5)))) / 2 \
        + (-log(1 - sig(torch.tensor(-0.5))) - log(1 - sig(torch.tensor(-3.0)))) / 2
    assert loss.item() == pytest.approx(float(want), rel=1e-6)
    assert stats["d_real"].item() == pytest.approx(float((sig(torch.tensor(2.0)) + sig(torch.tensor(0.5))) / 2))
    g_loss, _ = losses.NonSaturating().generator_loss(D, fake)            # -log D(G(z)), not log(1 - D)
    assert g_loss.item() == pytest.approx(float((-log(sig(torch.tensor(-0.5))) - log(sig(torch.tensor(-3.0)))) / 2))

    loss, stats = losses.Hinge().discriminator_loss(D, real, fake)
    # relu(1 - 2) = 0, relu(1 - .5) = .5 -> .25;  relu(1 - .5) = .5, relu(1 - 3) = 0 -> .25
    assert loss.item() == pytest.approx(0.5) and stats["d_real"].item() == pytest.approx(1.25)
    assert losses.Hinge().generator_loss(D, fake)[0].item() == pytest.approx(1.75)

    # The mean critic is linear with ||w|| = 1/sqrt(16) = 0.25: GP = 0.75^2 whatever alpha is.
    loss, stats = losses.WGANGP(gp_weight=10.0).discriminator_loss(D, real, fake)
    assert stats["wasserstein"].item() == pytest.approx(1.25 - (-1.75))
    assert stats["gp"].item() == pytest.approx(0.5625)
    assert loss.item() == pytest.approx(-3.0 + 10 * 0.5625)
    assert losses.WGANGP().generator_loss(D, fake)[0].item() == pytest.approx(1.75)


@pytest.mark.parametrize("gan", gans.NAMES)
def test_extra_series_are_the_stats_the_loss_returns(gan):
    loss = losses.make_loss(gans.get(gan))
    _, D = models.build(gans.get(gan), "fast", 1, 28, 16)
    real, fake = _pair(batch=4)
    _, d_stats = loss.discriminator_loss(D, real, fake)
    _, g_stats = loss.generator_loss(D, fake)
    assert set(d_stats) | set(g_stats) == set(gans.get(gan).series)
    # Tensors, not floats: reading a value inside the step would force a device sync.
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad
               for v in {**d_stats, **g_stats}.values())


def test_make_loss_passes_gp_weight_and_refuses_unknown_names():
    assert losses.make_loss(gans.get("wgan-gp"), gp_weight=3.0).gp_weight == 3.0
    with pytest.raises(ValueError, match="wgan-gp"):
        losses.make_loss(gans.get("lsgan"))


# ---- the critic schedule, on the production step (core/step.py, what the trainer runs) ---------
@pytest.mark.parametrize("n_critic", [1, 5])
def test_gan_step_makes_n_critic_critic_updates_per_generator_update(n_critic):
    from core import data
    from core.step import GanStep
    config = validate(TrainConfig(gan="wgan-gp", device="cpu", preset="fast", batch_size=8, steps=3,
                                  n_critic=n_critic).resolved())
    dataset = data.load(config.dataset)
    G, D = models.build(gans.get(config.gan), config.preset, dataset.channels, dataset.resolution, config.z_dim)
    betas = (config.beta1, config.beta2)
    opt_g = torch.optim.Adam(G.parameters(), lr=config.lr_g, betas=betas)
    opt_d = torch.optim.Adam(D.parameters(), lr=config.lr_d, betas=betas)
    step = GanStep(G, D, opt_g, opt_d, losses.make_loss(gans.get(config.gan), config.gp_weight),
                   runtime.Runtime(devices.probe("cpu")), config.n_critic, config.z_dim)
    batches = data.BatchStream(dataset.images, config.batch_size, torch.device("cpu"), seed=config.seed)
    order = []
    opt_d.register_step_post_hook(lambda *_: order.append("D"))
    opt_g.register_step_post_hook(lambda *_: order.append("G"))
    for _ in range(config.steps):
        step(batches)
    assert order == (["D"] * n_critic + ["G"]) * config.steps     # the critic goes first, every time
    # Adam's own counters agree (every parameter got every update).
    assert {int(s["step"]) for s in opt_d.state.values()} == {config.steps * n_critic}
    assert {int(s["step"]) for s in opt_g.state.values()} == {config.steps}
    assert (config.beta1, config.beta2, config.lr_d, config.gp_weight) == (0.0, 0.9, 1e-4, 10.0)


# ---- a short real run of each loss through the trainer's entry point ---------------------------
@pytest.mark.parametrize("gan", gans.NAMES)
def test_short_training_run(tmp_path, gan):
    config = TrainConfig(gan=gan, device="cpu", preset="fast", batch_size=8, steps=20, log_every=10,
                         grid_every=15, checkpoint_every=20)
    plan = cpu_plan(config)
    run = RunDir.create(plan, root=str(tmp_path))
    assert train(plan, run.path) == "done"
    assert run.read_status().state == "done"

    events, _ = run.read_events()
    losses_logged = [e for e in events if "loss_d" in e]
    assert [e["step"] for e in losses_logged] == [1, 10, 20]
    for event in losses_logged:
        series = {"loss_d", "loss_g", *gans.get(gan).series}
        assert series <= set(event), f"missing {series - set(event)} at step {event['step']}"
        assert all(math.isfinite(event[k]) for k in series)
        if gan == "wgan-gp":
            assert event["gp"] >= 0
        if gan == "dcgan":
            assert 0 < event["d_real"] < 1 and 0 < event["d_fake"] < 1
    # Early grids every 10 steps (the picture changes fastest then), then every grid_every.
    assert [step for step, _ in run.grids()] == [1, 10, 15, 20]

    # The checkpoint's optimizer counters: n_critic critic updates for each of the 20 G updates.
    state = run.load_checkpoint()
    n_critic = validate(config.resolved()).n_critic
    assert {int(s["step"]) for s in state["opt_d"]["state"].values()} == {20 * n_critic}
    assert {int(s["step"]) for s in state["opt_g"]["state"].values()} == {20}


def test_a_resumed_relativistic_run_is_step_for_step_the_unbroken_one(tmp_path):
    """Its lazy R1 falls on every 16th of D's updates counted over the whole run, a resume's too: the
    count travels in the checkpoint, as the batches' order and the noise do."""
    from core import train
    flags = ["--gan", "rpgan", "--batch-size", "16", "--device", "cpu", "--quality-every", "0",
             "--lr-decay-start", "1", "--grid-every", "1000"]
    assert train.main([*flags, "--steps", "20", "--run-dir", str(tmp_path / "unbroken")]) == 0
    assert train.main([*flags, "--steps", "10", "--run-dir", str(tmp_path / "resumed")]) == 0
    assert train.main(["--resume", str(tmp_path / "resumed"), "--steps", "20"]) == 0
    unbroken, resumed = (torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)
                         for name in ("unbroken", "resumed"))
    assert resumed["step"] == unbroken["step"] == 20
    for net in ("G", "D"):
        for name, value in unbroken[net].items():
            assert torch.equal(value, resumed[net][name]), (net, name)
