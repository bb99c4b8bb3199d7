"""Fixtures of the XLA tests: a torch_xla that fails to import, and the real CLI runs a module's
tests share. (Every test marked xla needs torch_xla: tests/conftest.py skips it without, or fails it in CI.)"""
from __future__ import annotations

import os

import pytest

from tests.xla.xlahelpers import ROOT, cli_runs


@pytest.fixture
def broken_xla(tmp_path) -> str:
    """A PYTHONPATH entry whose torch_xla fails to import the way a torch/torch_xla version
    mismatch does. A real import failure in a real child process, not a mock."""
    package = tmp_path / "broken_site" / "torch_xla"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("_XLAC.cpython-311-x86_64-linux-gnu.so: undefined symbol: '
        '_ZN5torch8autograd12VariableInfoC1ERKN2at6TensorE")\n')
    return f"{package.parent}{os.pathsep}{ROOT}"


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    return cli_runs(tmp_path_factory)
