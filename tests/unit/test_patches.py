"""Each patch of app/patches.py against the installed Gradio and uvicorn: what it replaces is there
in the shape it expects, and once applied the package does what the patch says. A failure names the
patch that no longer applies. Gradio is imported as the app imports it (tests/conftest.py)."""
import ast
import asyncio
import importlib.util
import inspect
import logging
import socket
import sys
import textwrap

import numpy as np
import pytest

import gradio as gr
import gradio.component_meta
import gradio.http_server
import gradio.ipython_ext
import uvicorn
import uvicorn.config
from gradio import processing_utils, queueing

from app import patches, serving


def source_of(module_name: str) -> ast.Module:
    return ast.parse(open(importlib.util.find_spec(module_name).origin).read())


def calls(function, name: str) -> bool:
    """Whether the function's own code calls `name` (a function, or a method of self or the module)."""
    return any(isinstance(node, ast.Call) and name in (getattr(node.func, "id", None), getattr(node.func, "attr", None))
               for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function)))))


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


# ---- Gradio's import (applied by tests/conftest.py before Gradio was imported) ----------------------
def test_gradio_is_imported_without_its_stub_writer(tmp_path):
    writer = next(node for node in source_of("gradio.component_meta").body
                  if isinstance(node, ast.FunctionDef) and node.name == "create_or_modify_pyi")
    assert [a.arg for a in writer.args.args] == ["component_class", "class_name", "events"]
    assert calls(gradio.component_meta.ComponentMeta.__new__, "create_or_modify_pyi")   # looked up at each class
    assert gradio.component_meta.create_or_modify_pyi.__module__ == "app.patches"
    # A component class made from a file: Gradio's stub writer would write box.pyi beside it.
    (tmp_path / "box.py").write_text("import gradio as gr\n\n\nclass Box(gr.Textbox):\n    EVENTS = ['change']\n")
    spec = importlib.util.spec_from_file_location("blink_test_box", tmp_path / "box.py")
    sys.modules[spec.name] = importlib.util.module_from_spec(spec)   # where the writer looks for its file
    try:
        spec.loader.exec_module(sys.modules[spec.name])
    finally:
        del sys.modules[spec.name]
    assert not (tmp_path / "box.pyi").exists()


def test_gradio_is_imported_without_ipython_outside_a_notebook():
    # Gradio goes on without IPython's magics where `import IPython` fails.
    guarded = [node for node in ast.walk(source_of("gradio.ipython_ext")) if isinstance(node, ast.Try)
               and any(getattr(h.type, "id", None) == "ImportError" for h in node.handlers)]
    assert any(isinstance(s, ast.ImportFrom) and s.module.startswith("IPython") for t in guarded for s in t.body)
    # The cell magic's imports failed as they do where IPython is missing; the extension's entry is kept.
    assert not hasattr(gradio.ipython_ext, "register_cell_magic")
    assert callable(gradio.load_ipython_extension)
    # Hidden only while Gradio's module loaded (sys.modules held None for it then): importable afterwards.
    assert sys.modules.get("IPython", "not imported") is not None
    import IPython
    assert IPython.__name__ == "IPython"


# ---- before launch ---------------------------------------------------------------------------------
async def answer(scope, receive, send):
    if scope["path"] == "/slow":
        await asyncio.sleep(0.6)   # past the headers' deadline: a request whose headers came is never cut
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_slow_requests_are_closed_by_uvicorns_auto_protocol(monkeypatch):
    assert inspect.signature(uvicorn.Config).parameters["http"].default == "auto"
    server_config = next(node for node in ast.walk(ast.parse(inspect.getsource(gradio.http_server.start_server)))
                         if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Config")
    assert "http" not in [k.arg for k in server_config.keywords]   # Gradio's server gets "auto"
    monkeypatch.setitem(uvicorn.config.HTTP_PROTOCOLS, "auto", uvicorn.config.HTTP_PROTOCOLS["auto"])   # put back after
    monkeypatch.setattr(serving, "REQUEST_HEADERS_SECONDS", 0.3)
    patches.close_slow_requests()
    config = uvicorn.Config(answer, lifespan="off", log_level="warning")
    config.load()
    assert config.http_protocol_class is serving.TimedHTTPProtocol

    async def probe() -> list[bytes]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        server = uvicorn.Server(config)
        serving_task = asyncio.create_task(server.serve(sockets=[listener]))
        while not server.started:
            await asyncio.sleep(0.01)
        port = listener.getsockname()[1]
        try:
            silent = (await asyncio.open_connection("127.0.0.1", port))[0]
            slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
            slow_writer.write(b"GET /slow HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            return await asyncio.wait_for(asyncio.gather(silent.read(), slow_reader.read()), 3)
        finally:
            server.should_exit = True
            await serving_task
            listener.close()
    silent, slow = asyncio.run(probe())
    assert silent == b""                                              # closed, no request ever came
    assert slow.startswith(b"HTTP/1.1 200") and slow.endswith(b"ok")


def test_cached_images_are_written_whole_where_gradio_writes_them(tmp_path, monkeypatch):
    original = processing_utils.save_pil_to_cache
    monkeypatch.setattr(processing_utils, "save_pil_to_cache", original)   # put back after
    assert inspect.signature(original).parameters["name"].default == "image"
    assert inspect.signature(original).parameters["format"].default == "webp"
    assert calls(processing_utils.save_img_array_to_cache, "save_pil_to_cache")   # the image output's path
    assert parameters(processing_utils.encode_pil_to_bytes)[:2] == ["pil_image", "format"]
    assert parameters(processing_utils.hash_bytes) == ["bytes"]
    patches.write_cached_images_whole()
    patched = processing_utils.save_pil_to_cache
    assert patched is not original and parameters(patched) == parameters(original)
    pixels = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    gradios = original(gr.processing_utils.Image.fromarray(pixels), str(tmp_path / "gradio"))
    image = gr.Image(format="webp")
    image.GRADIO_CACHE = str(tmp_path / "blink")
    ours = image.postprocess(pixels).path                      # a gr.Image output, as a handler's goes
    assert image.postprocess(pixels.copy()).path == ours      # known by its pixels
    assert (ours.replace(str(tmp_path / "blink"), "") == gradios.replace(str(tmp_path / "gradio"), "")
            and open(ours, "rb").read() == open(gradios, "rb").read())


def test_a_malformed_call_is_refused_in_one_line():
    method = gr.Blocks.preprocess_data
    assert inspect.iscoroutinefunction(method) and parameters(method) == ["self", "block_fn", "inputs", "state",
                                                                           "explicit_call"]
    assert calls(gr.Blocks.process_api, "preprocess_data")    # through the instance: a demo's own is used
    with gr.Blocks() as demo:
        size, shown = gr.Number(label="Batch size"), gr.Textbox()
        size.change(lambda n: str(n), size, shown, api_name="show")
    patches.refuse_malformed_calls(demo)
    with pytest.raises(gr.Error) as refusal:
        asyncio.run(demo.process_api(demo.fns[0], [], state=None))
    assert refusal.value.message == "/show: it takes 1 values, the call sent 0."


def test_the_queue_polls_slowly_when_idle():
    assert "self.sleep_when_free" in inspect.getsource(queueing.Queue.start_processing)   # read at each wait
    assert "self.progress_update_sleep_when_free" in inspect.getsource(queueing.Queue.start_progress_updates)
    demo = gr.Blocks().queue()
    assert isinstance(demo._queue, queueing.Queue)
    assert (demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free) == (0.001, 0.01)
    patches.quiet_queue_when_idle(demo)
    assert (demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free) == (0.05, 0.25)
    demo.queue()   # a new queue, as Gradio made it: the patch comes after demo.queue()
    assert demo._queue.sleep_when_free == 0.001


def test_a_closing_server_waits_a_second_for_open_streams(monkeypatch):
    assert "self.config.timeout_graceful_shutdown" in inspect.getsource(uvicorn.Server.shutdown)   # read then
    assert "self.server = server" in inspect.getsource(gr.Blocks.launch)
    assert issubclass(gradio.http_server.Server, uvicorn.Server)
    log = logging.getLogger("uvicorn.error")
    monkeypatch.setattr(log, "level", log.level)   # put back after
    patches.close_quickly(gr.Blocks())   # not launched: nothing to do
    demo = gr.Blocks()
    demo.server = gradio.http_server.Server(uvicorn.Config(answer))
    assert demo.server.config.timeout_graceful_shutdown is None    # as Gradio starts it: no limit
    patches.close_quickly(demo)
    assert demo.server.config.timeout_graceful_shutdown == 1 and log.level == logging.CRITICAL


# ---- the built page --------------------------------------------------------------------------------
def test_a_bad_value_is_refused_naming_its_field():
    assert parameters(gr.Number.preprocess) == ["self", "payload"]
    assert "block.preprocess," in inspect.getsource(gr.Blocks.preprocess_data)   # each input's own, by its instance
    with gr.Blocks() as demo:
        size, shown = gr.Number(label="Batch size"), gr.Textbox()
        size.change(lambda n: str(n), size, shown, api_name="show")
    patches.name_bad_values(demo)
    assert type(size) is not gr.Number and isinstance(size, gr.Number)
    assert (type(size).__name__, size.get_block_name()) == ("Number", "number")   # the page draws it as one
    with pytest.raises(gr.Error) as refusal:
        asyncio.run(demo.preprocess_data(demo.fns[0], ["abc"], None))
    assert refusal.value.message.startswith("Batch size: 'abc' is not a number.")
    assert asyncio.run(demo.preprocess_data(demo.fns[0], [3], None)) == [3]
