"""The few git operations the store needs, done through GitPython's object database so that a
commit costs no subprocess and never touches a work tree (sessions have none: see repo.py)."""

from __future__ import annotations

import os
import re
from io import BytesIO

import git
from git import Actor
from git.index.typ import BaseIndexEntry, IndexEntry
from git.objects import Blob, Commit, Tree
from gitdb import IStream, LooseObjectDB
from gitdb.util import hex_to_bin

FILE_MODE = 0o100644
_IDENT_UNSAFE = re.compile(r"[<>\n]")


def _loose(repo: git.Repo) -> LooseObjectDB:
    return LooseObjectDB(os.path.join(repo.git_dir, "objects"))


def write_tree(repo: git.Repo, files: dict[str, bytes]) -> Tree:
    """Store `files` (path -> content, '/' for folders) as blobs and return their tree.

    Blobs go straight into the loose object store: GitPython's default object database starts
    a `git hash-object` process per object, most of a commit's time. An in-memory IndexFile
    is used only for its tree writer, which sorts entries and builds subtrees the way git
    does; it is never read from or written to disk."""
    loose = _loose(repo)
    entries = {}
    for path, data in files.items():
        blob = loose.store(IStream(Blob.type, len(data), BytesIO(data)))
        base = BaseIndexEntry((FILE_MODE, blob.binsha, 0, path))
        entries[(path, 0)] = IndexEntry.from_base(base)
    index = git.IndexFile(repo)
    index.entries = entries
    return index.write_tree()


def write_commit(
    repo: git.Repo,
    tree: Tree,
    parents: list[str],
    message: str,
    author: Actor,
    committer: Actor,
    author_time: int,
    commit_time: int,
) -> Commit:
    """Store a commit object and return it (no ref moves).

    Written here rather than by Commit.create_from_tree, which stores through `git
    hash-object` (a process per commit, half a commit's time, more on a loaded machine). The
    format is git's documented commit object; `git fsck --strict` checks it in the tests.
    Times are UTC: a session gathers candidates from machines in any time zone."""
    for who in (author, committer):
        if _IDENT_UNSAFE.search(f"{who.name}{who.email}"):
            raise ValueError(f"identity {who.name!r} <{who.email}> contains '<', '>' or a newline")
    lines = [f"tree {tree.hexsha}"]
    lines += [f"parent {p}" for p in parents]
    lines.append(f"author {author.name} <{author.email}> {author_time} +0000")
    lines.append(f"committer {committer.name} <{committer.email}> {commit_time} +0000")
    data = ("\n".join(lines) + "\n\n" + message).encode()
    stored = _loose(repo).store(IStream(Commit.type, len(data), BytesIO(data)))
    return Commit(repo, stored.binsha)


def commit_at(repo: git.Repo, hexsha: str) -> Commit:
    # Built from the sha alone: no object read, the commit is known to exist.
    return Commit(repo, hex_to_bin(hexsha))


def point_ref(repo: git.Repo, refname: str, commit: Commit) -> None:
    """Make `refname` (e.g. refs/heads/main, refs/tags/best) name `commit`, created or moved
    (a lock file and a rename, as git itself does)."""
    git.Reference(repo, refname).set_reference(commit)


def read_blob(repo: git.Repo, spec: str) -> bytes | None:
    """The content of `spec` (e.g. '<sha>:candidate.cu'), or None if it names nothing."""
    try:
        _, kind, _, data = repo.git.get_object_data(spec)
    except ValueError:  # cat-file answered "missing"
        return None
    except BrokenPipeError:
        # GitPython's long-lived `git cat-file` died: Ctrl-C in a terminal (or `timeout`) signals the
        # whole process group, and the search goes on to commit what was in flight. Start another.
        repo.git.clear_cache()
        try:
            _, kind, _, data = repo.git.get_object_data(spec)
        except ValueError:
            return None
    return data if kind in (b"blob", "blob") else None  # GitPython gives bytes


