"""A bundle that cannot be opened is named as the user gave it, in one line: never by the
temporary folder it is imported into, nor by an absolute path the user did not type."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from cuco_tui.lineage import SessionError, open_session_or_bundle
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "kv_transfer-offline-h200x2.bundle"


def _refusal(path: str) -> str:
    with pytest.raises(SessionError) as caught:
        open_session_or_bundle(Path(path)).close()
    message = str(caught.value)
    assert "\n" not in message and "cuco-lineage-" not in message, message
    return message


def test_a_bundle_that_cannot_be_opened_is_named_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("junk.bundle").write_text("not a bundle\n")
    assert _refusal("junk.bundle").startswith("junk.bundle is not a readable git bundle: ")
    Path("cut.bundle").write_bytes(EXAMPLE.read_bytes()[:20000])  # git says two things of it
    assert _refusal("cut.bundle").startswith("cut.bundle is not a readable git bundle: ")
    other = git.Repo.init(tmp_path / "other")
    someone = git.Actor("someone", "someone@example.com")  # no git identity needed on the machine
    other.index.commit("not a session", author=someone, committer=someone)
    other.git.bundle("create", str(tmp_path / "other.bundle"), "--all")
    other.close()
    message = _refusal("other.bundle")
    assert message.startswith("the bundle other.bundle holds a git repository but not a cuco session"), message
    assert "folder" not in message, message
