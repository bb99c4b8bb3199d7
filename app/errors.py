"""Refusals: a message for the student, one line (not a traceback) in the server's terminal."""
from __future__ import annotations

import re
import sys

import gradio as gr


# The most of a refusal's words one log line keeps: a caller's value never fills the log.
LOGGED_CHARACTERS = 500
# The longest text a field takes: a path's (PATH_MAX); a choice's (a class name, at most
# MAX_CLASS_NAME characters, is the longest choice). A longer value is refused where it enters.
MAX_TEXT = 4096


def log_refusal(title: str, message: str) -> None:
    """A refused input is not a server fault: one line says what was refused."""
    line = one_line(message)
    if len(line) > LOGGED_CHARACTERS:
        line = line[:LOGGED_CHARACTERS - 3] + "..."
    print(f"refused ({title}): {line}", file=sys.stderr, flush=True)


def one_line(text: str) -> str:
    """text with its line breaks and other control characters escaped: a caller's words (a path it
    sent) cannot start a line of their own in the log."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def refused(message: str, title: str) -> gr.Error:
    """The error to raise for input the app refuses (Gradio would print a full traceback). title:
    what kind of refusal, for the server's log and an API caller. Gradio heads every error toast
    with its type whatever the title says, so the page heads them "Not done" (REFUSAL_TOAST_CSS)."""
    log_refusal(title, message)
    return gr.Error(message, title=title, print_exception=False)


# Gradio's toast heads an error with its capitalised type ("Error") and never shows the title the
# server sends; the app raises errors only to refuse, so the page says what a student needs to know:
# what they asked for was not done, and the toast's text says why. (Equal-specificity selectors
# with Gradio's scoped ones, hence the body class in front.)
REFUSAL_TOAST_CSS = """
.toast-body .toast-title.error { font-size: 0; }
.toast-body .toast-title.error::before { content: "Not done"; font-size: var(--text-lg); }
.toast-body .toast-title.error .toast-count { font-size: var(--text-lg); }
"""


# ---- a bad value in a named API's field: the project's message, naming the field --------------
def _expected(component) -> str:
    """What a component's field takes, in words."""
    choices = getattr(component, "choices", None)
    if choices:
        values = [c[1] if isinstance(c, (tuple, list)) else c for c in choices]
        shown = ", ".join(repr(v) for v in values[:8]) + (", ..." if len(values) > 8 else "")
        return f"one of {shown}"
    low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
    if isinstance(component, (gr.Number, gr.Slider)):
        return "a number" + (f" from {low:g} to {high:g}" if low is not None and high is not None else "")
    if isinstance(component, gr.Checkbox):
        return "true or false"
    if isinstance(component, gr.Textbox):
        return "text"
    return "a value this field takes (a file it can read, for a file field)"


def field_label(component) -> str:
    return component.label or component.elem_id or component.get_block_name()


def text_bound(component) -> int:
    """The most characters a text value of this field may have."""
    from core.architecture import MAX_CLASS_NAME
    return MAX_CLASS_NAME if getattr(component, "choices", None) is not None else MAX_TEXT


def bad_value_message(component, payload) -> str:
    label = field_label(component)
    shown = repr(payload)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{label}: {shown} is not {_expected(component)}. Change this value and try again."


# ---- a call Gradio itself refuses: one line, not its traceback --------------------------------------
def malformed_call_reason(exc: BaseException) -> str | None:
    """What was wrong with a call Gradio refused while reading its inputs, in words that name no
    server path; None for an error that is not the caller's (its traceback stays)."""
    import pydantic
    from gradio.exceptions import InvalidPathError
    if isinstance(exc, InvalidPathError):
        # Gradio's message names the path made absolute: the server's working folder, for a relative one.
        return "a file path that was not uploaded to this server (send files with the upload route first)"
    if isinstance(exc, pydantic.ValidationError):
        problem = exc.errors()[0].get("msg", "") if exc.errors() else ""
        return f"not a valid {exc.title}: {problem.removeprefix('Value error, ').rstrip('.')}"
    if isinstance(exc, ValueError):
        counts = re.search(r"didn't receive enough input values \(needed: (\d+), got: (\d+)\)", str(exc))
        if counts:
            return f"it takes {counts[1]} values, the call sent {counts[2]}"
        if "embedded null byte" in str(exc):
            return "a file path with a NUL character"
    return None
