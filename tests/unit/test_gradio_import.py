"""Gradio imported as the app imports it (app/gradio_import.py; tests/conftest.py imports it so in
every test process): without its type-stub writer and, in a process that is no notebook, without
IPython."""
import importlib.util
import sys

import gradio
import gradio.ipython_ext


def test_gradio_is_imported_without_its_stub_writer_or_ipython_outside_a_notebook(tmp_path):
    # A component class made from a file: Gradio's stub writer would write box.pyi beside it.
    (tmp_path / "box.py").write_text("import gradio as gr\n\n\nclass Box(gr.Textbox):\n    EVENTS = ['change']\n")
    spec = importlib.util.spec_from_file_location("blink_test_box", tmp_path / "box.py")
    sys.modules[spec.name] = importlib.util.module_from_spec(spec)   # where the writer looks for its file
    try:
        spec.loader.exec_module(sys.modules[spec.name])
    finally:
        del sys.modules[spec.name]
    assert not (tmp_path / "box.pyi").exists()
    # The cell magic's imports failed as they do where IPython is missing; the extension's entry is kept.
    assert not hasattr(gradio.ipython_ext, "register_cell_magic")
    assert callable(gradio.load_ipython_extension)
    # Hidden only while Gradio's module loaded (sys.modules held None for it then): importable afterwards.
    assert sys.modules.get("IPython", "not imported") is not None
    import IPython
    assert IPython.__name__ == "IPython"
