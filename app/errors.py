"""Refusals: a message for the student, one line (not a traceback) in the server's terminal."""
from __future__ import annotations

import sys

import gradio as gr


def log_refusal(title: str, message: str) -> None:
    """A refused input is not a server fault: one line says what was refused."""
    print(f"refused ({title}): {message}", file=sys.stderr, flush=True)


def refused(message: str, title: str = "Error") -> gr.Error:
    """The error to raise for input the app refuses (Gradio would print a full traceback)."""
    log_refusal(title, message)
    return gr.Error(message, title=title, print_exception=False)
