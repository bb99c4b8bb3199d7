"""Every change the app makes to Gradio's and uvicorn's own code while it runs, one function each:
what it replaces, in the version it was written against, and why. Importing this applies nothing;
tests/unit/test_patches.py fails when a patch no longer applies.

    trim_gradio_import()    # first: before anything imports Gradio
    apply(demo)             # after demo.queue(), before demo.launch()
    close_quickly(demo)     # on SIGTERM or Ctrl-C
    name_bad_values(demo)   # once the page is built (app/ui.py build_app)
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

KNOWN_IMAGES = 256      # image outputs remembered by their pixels (a few dozen bytes each)


# ---- Gradio's import -------------------------------------------------------------------------------
def _without_stub_writer(module) -> None:
    """gradio 6.31.0: component_meta.create_or_modify_pyi(component_class, class_name, events)."""
    # Why: at each import it parses every component's source to render stubs for Gradio's developers: slow.
    if hasattr(module, "create_or_modify_pyi"):
        module.create_or_modify_pyi = lambda *args, **kwargs: None


# gradio 6.31.0 ipython_ext: `from IPython.core.magic import ...`, in a try that goes on without it.
# Why: outside a notebook (IPython not imported yet) its IPython, prompt_toolkit and jedi are only start time.
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
        load, missing = spec.loader.exec_module, MISSING_WHILE_LOADING.get(name)

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
    """Gradio, imported after this, loads the modules above so; one imported already is left as it is."""
    if "gradio" not in sys.modules and not any(isinstance(f, _TrimmedGradio) for f in sys.meta_path):
        sys.meta_path.insert(0, _TrimmedGradio())


# ---- before launch ---------------------------------------------------------------------------------
def apply(demo) -> None:
    close_slow_requests()
    write_cached_images_whole()
    refuse_malformed_calls(demo)
    quiet_queue_when_idle(demo)


def close_slow_requests() -> None:
    """uvicorn 0.55.0: config.HTTP_PROTOCOLS["auto"], the HTTP protocol Gradio's server gets."""
    # Why: uvicorn waits for headers forever, so silent clients held sockets (app/serving.py TimedHTTPProtocol).
    import uvicorn.config
    uvicorn.config.HTTP_PROTOCOLS["auto"] = "app.serving:TimedHTTPProtocol"


def write_cached_images_whole() -> None:
    """gradio 6.31.0: processing_utils.save_pil_to_cache(img, cache_dir, name="image", format="webp")."""
    # Why: Gradio rewrites the file in place each time, cutting off a viewer it is served to meanwhile.
    import collections
    import hashlib
    import os
    import threading
    from pathlib import Path

    from gradio import processing_utils
    written: collections.OrderedDict = collections.OrderedDict()   # what the pixels were -> their file
    lock = threading.Lock()

    def touched(path: str) -> bool:   # kept: Gradio's delete_cache ages files by time
        try:
            os.utime(path)
            return True
        except OSError:
            return False

    def save_pil_to_cache(img, cache_dir, name: str = "image", format: str = "webp") -> str:
        # Found by its pixels: hashing them costs a fraction of encoding the picture again.
        pixels = hashlib.sha256(img.tobytes())
        pixels.update(repr((img.mode, img.size, img.getpalette(), str(cache_dir), name, format)).encode())
        with lock:
            known = written.get(pixels.digest())
        if known and touched(known):
            return known
        data = processing_utils.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / processing_utils.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not touched(str(path)):
            partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
            partial.write_bytes(data)
            os.replace(partial, path)
        with lock:
            written[pixels.digest()] = str(path)
            while len(written) > KNOWN_IMAGES:
                written.popitem(last=False)
        return str(path)
    processing_utils.save_pil_to_cache = save_pil_to_cache


def refuse_malformed_calls(demo) -> None:
    """gradio 6.31.0: Blocks.preprocess_data(block_fn, inputs, state, explicit_call=False), async."""
    # Why: Gradio prints a malformed call's traceback as if the server had failed; one line naming the endpoint.
    import gradio as gr

    from app.errors import malformed_call_reason, refused
    preprocess_data = demo.preprocess_data

    async def refusing_preprocess_data(block_fn, inputs, state, explicit_call: bool = False):
        try:
            return await preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error:
            raise
        except Exception as exc:
            reason = malformed_call_reason(exc)
            if reason is None:
                raise
            raise refused(f"/{block_fn.api_name or block_fn.name}: {reason}.", title="Malformed call") from None
    demo.preprocess_data = refusing_preprocess_data


def quiet_queue_when_idle(demo) -> None:
    """gradio 6.31.0: Queue.sleep_when_free (0.001 s) and progress_update_sleep_when_free (0.01 s)."""
    # Why: polled that often, an idle queue takes CPU from the trainer; a queued press waits 50 ms at most.
    demo._queue.sleep_when_free = 0.05
    demo._queue.progress_update_sleep_when_free = 0.25


# ---- on the way out --------------------------------------------------------------------------------
def close_quickly(demo) -> None:
    """uvicorn 0.55.0: the running Server's config.timeout_graceful_shutdown (gradio 6.31.0 Blocks.server)."""
    # Why: the trainer has saved: open streams need not hold the server 5 s, nor their cancelling be logged.
    import logging
    server = getattr(demo, "server", None)
    if server is not None:
        server.config.timeout_graceful_shutdown = 1
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)


# ---- the built page --------------------------------------------------------------------------------
_checked_classes: dict[type, type] = {}


def name_bad_values(demo) -> None:
    """gradio 6.31.0: the class of each event input (a Component; Gradio calls its `preprocess(payload)`)."""
    # Why: Gradio refuses a bad value naming no field ("input component at index 4"), with a traceback.
    import gradio as gr
    for fn in demo.fns.values():
        for component in fn.inputs:
            if isinstance(component, gr.components.Component) and not component.stateful \
                    and not hasattr(component, "is_template") and type(component) not in _checked_classes.values():
                component.__class__ = _checked_class(type(component))


def _checked_class(cls: type) -> type:
    """cls with a preprocess whose failures name the field; named as cls, so drawn as it. A class, not a
    patched method, so per-session copies keep it."""
    import gradio as gr

    from app.errors import bad_value_message, field_label, refused, text_bound
    if cls not in _checked_classes:
        def preprocess(self, payload):
            if isinstance(payload, str) and len(payload) > text_bound(self):
                raise refused(f"{field_label(self)}: {len(payload):,} characters, more than the {text_bound(self):,} "
                              "this field takes. Change this value and try again.", title="Check the value")
            if isinstance(self, gr.Checkbox) and not isinstance(payload, (bool, type(None))):
                raise refused(bad_value_message(self, payload), title="Check the value")   # Gradio takes any truthy thing
            if isinstance(self, gr.Number) and payload is not None and not isinstance(payload, (int, float)):
                raise refused(bad_value_message(self, payload), title="Check the value")   # unrounded, Gradio passes anything
            try:
                return cls.preprocess(self, payload)
            except Exception:   # Gradio's own words (and its gr.Errors) name no field
                raise refused(bad_value_message(self, payload), title="Check the value") from None
        _checked_classes[cls] = type(cls.__name__, (cls,), {"preprocess": preprocess, "__module__": cls.__module__,
                                                            "__qualname__": cls.__qualname__})
    return _checked_classes[cls]
