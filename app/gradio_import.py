"""Gradio's import without its type-stub writer and, outside a notebook, IPython: app/patches.py."""
from app.patches import trim_gradio_import  # noqa: F401  (tests/conftest.py applies it from here)
