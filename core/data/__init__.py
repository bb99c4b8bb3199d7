"""Datasets and the input pipeline (being split by concern; see sources.py for now)."""
from core.data.sources import *  # noqa: F401,F403
