"""The other GAN types' graphs on four XLA:CPU devices, as test_xla.py checks DCGAN's: one real
CLI run each, compiling once and never falling back to the host. A file of their own, so that
pytest-xdist runs them beside test_xla.py's runs rather than after them."""
from __future__ import annotations

import pytest

from tests.xla.xlahelpers import assert_compiles_once_on_four_devices


@pytest.mark.xla
@pytest.mark.parametrize("gan, batch, precision", [
    ("hinge", 16, "bf16"),   # spectral norm (torch.vdot is not lowered by XLA) in a TPU's default precision
    # Critic updates (gradient penalty: double backward) and a generator update in one graph.
    pytest.param("wgan-gp", 8, "fp32", marks=pytest.mark.slow),
])
def test_real_trainer_on_four_devices_compiles_once_and_never_falls_back(cli_run, gan, batch, precision):
    assert_compiles_once_on_four_devices(cli_run, gan, batch, precision)
