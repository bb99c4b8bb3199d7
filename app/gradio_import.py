"""Gradio's import without its type-stub writer.

At every `import gradio`, each of its components' classes, as it is made, has the source file that
defines it parsed again and a type stub (`.pyi`) rendered from a template and compared with, or
written beside, the installed file (gradio/component_meta.py, `create_or_modify_pyi`): stubs for the
editors of people developing Gradio itself. The app reads none of them, and the work is a large
share of the app's start (bench/README.md, "The page"). So the app's process, before it
imports Gradio, has that one function made to do nothing; everything else of Gradio is untouched.
A Gradio without that function, or already imported, is left as it is.

    skip_type_stubs()      # before anything imports gradio
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"


class _StubWriterOff(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when Gradio's component_meta is imported, it lets Python's own finder
    load it and, once loaded, replaces its stub writer."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)    # once is all: the module is imported once
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module) -> None:
            load(module)
            if hasattr(module, "create_or_modify_pyi"):
                module.create_or_modify_pyi = lambda *args, **kwargs: None
        spec.loader.exec_module = exec_module
        return spec


def skip_type_stubs() -> None:
    if MODULE not in sys.modules and not any(isinstance(f, _StubWriterOff) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubWriterOff())
