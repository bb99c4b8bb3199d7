"""Fixtures the unit tests share."""
import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A dataset cache of the test's own (BLINK_DATA_DIR), offline, with checksums as they default."""
    root = tmp_path / "cache"
    root.mkdir()
    monkeypatch.setenv("BLINK_DATA_DIR", str(root))
    monkeypatch.setenv("BLINK_OFFLINE", "1")
    monkeypatch.delenv("BLINK_VERIFY_CHECKSUMS", raising=False)
    return root
