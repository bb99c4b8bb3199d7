"""Gradio's import without two pieces of work the app never uses.

- Its type-stub writer. At every `import gradio`, each of its components' classes, as it is made,
  has the source file that defines it parsed again and a type stub (`.pyi`) rendered from a template
  and compared with, or written beside, the installed file (gradio/component_meta.py,
  `create_or_modify_pyi`): stubs for the editors of people developing Gradio itself.
- IPython, outside a notebook. gradio/ipython_ext.py imports IPython's magics (and with them IPython,
  prompt_toolkit and jedi) for the `%%blocks` cell magic, and carries on without them where IPython
  is missing. A process that has not imported IPython itself is no notebook: it gets that module
  as if IPython were missing. In a notebook (IPython already imported) the module is left as it is.

The stub writer is a large share of the app's start, IPython a smaller one (bench/README.md, "The
page" and "The suite"). So the app's process, before it imports Gradio, has those two modules loaded
that way; everything else of Gradio is untouched. A Gradio without them, or already imported, is
left as it is.

    trim_gradio_import()      # before anything imports gradio
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


def _without_stub_writer(module) -> None:
    if hasattr(module, "create_or_modify_pyi"):
        module.create_or_modify_pyi = lambda *args, **kwargs: None


# What each trimmed module needs: a change once it is loaded, or a module that must look missing
# while it loads (unless already imported).
AFTER_LOAD = {"gradio.component_meta": _without_stub_writer}
MISSING_WHILE_LOADING = {"gradio.ipython_ext": "IPython"}


class _TrimmedGradio(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when one of the modules above is imported, it lets Python's own finder
    load it, in the way the tables above say."""

    def __init__(self):
        self.pending = set(AFTER_LOAD) | set(MISSING_WHILE_LOADING)

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        self.pending.discard(name)    # once each is all: a module is imported once
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module
        missing = MISSING_WHILE_LOADING.get(name)

        def exec_module(module) -> None:
            hide = missing is not None and missing not in sys.modules
            if hide:
                sys.modules[missing] = None     # `import IPython` raises ImportError
            try:
                load(module)
            finally:
                if hide and sys.modules.get(missing, 0) is None:
                    del sys.modules[missing]
            AFTER_LOAD.get(name, lambda module: None)(module)
        spec.loader.exec_module = exec_module
        return spec


def trim_gradio_import() -> None:
    if "gradio" not in sys.modules and not any(isinstance(f, _TrimmedGradio) for f in sys.meta_path):
        sys.meta_path.insert(0, _TrimmedGradio())
