"""Editing a proposal's source in the engineer's editor ($VISUAL, else $EDITOR, else vi): the
source goes to a temporary file, the app hands the terminal to the editor (Textual's suspend)
and takes it back when the editor exits; the file's text is the edit."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from textual.app import App, SuspendNotSupported

from cuco_tui.harness.env import child_env


class EditError(Exception):
    """The edit could not happen (no editor, no terminal to hand over, the editor failed)."""


def editor_command() -> list[str]:
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    return shlex.split(command)


def run_suspended(app: App, command: list[str]) -> int:
    """Run `command` with the terminal handed over; its exit status."""
    try:
        with app.suspend():
            return subprocess.call(command, env=child_env())
    except SuspendNotSupported:
        raise EditError("this terminal cannot be handed to an editor (no suspend here); "
                        "edit the proposal's file elsewhere and reject it with a reason") from None


def edit_source(app: App, source: str, filename: str) -> str:
    """The source after the engineer edited it. Blocking: the editor owns the terminal until it
    exits (called on the event loop, which is what suspend needs). Raises EditError."""
    command = editor_command()
    if not command:
        raise EditError("$EDITOR is set but empty")
    with tempfile.TemporaryDirectory(prefix="cuco-edit-") as folder:
        path = Path(folder) / filename
        path.write_text(source)
        try:
            status = run_suspended(app, [*command, str(path)])
        except FileNotFoundError:
            raise EditError(f"the editor {command[0]!r} was not found; set $EDITOR") from None
        if status != 0:
            raise EditError(f"{command[0]} exited with status {status}; the proposal was left as it was")
        return path.read_text()
