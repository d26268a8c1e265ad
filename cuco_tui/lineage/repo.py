"""A session: a folder (in the sessions folder, search/sessions.py sessions_root) holding a git
repository with one commit per candidate (parents = the candidate's parents, so a crossover is a
merge commit), a ref per island, a `best` tag, and nothing that cannot be rebuilt from them (the
SQLite index lives in .git).

Every candidate also gets a lightweight tag named by its id (refs/tags/c0042). `main` names
only the newest candidate, and most candidates end up leaves (failures, dead ends) that no
later candidate descends from: without a ref of their own they would be unreachable, so
missing from `git log --all`, from bundles and from an index rebuild, and pruned by `git gc`.
The tags also let a person write `git show c0042:candidate.cu` or `git diff c0001 c0042`.

The repository is bare (`<session>/.git` with core.bare = true): candidates are written
straight into the object database, never checked out, so there is no work tree to go stale or
dirty while `main` moves. `git -C <session> log --graph --all` works as usual; to look at
files, use `git show <sha>:candidate.cu` or `git worktree add`.

The root commit's session.json records the machine the session was created on (GPUs, driver,
CUDA, NCCL: `machine()`); a `bounds` tag names a commit holding bounds.json, the perfect-overlap
bounds the search measured once on a GPU (`bounds()`, core/bounds.py); a `config` tag, a
commit holding config.json, the settings a resume changed (`update_config`). A profile taken of
a candidate later (lineage/profiles.py) is a commit under refs/profiles/<id>, a child of the
candidate's: the candidate's own commit never changes."""

from __future__ import annotations

import difflib
import json
import re
import sqlite3
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

import git
from git import Actor

from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.files import RECORD, SOURCE, candidate_files, dump_json, record_from_json
from cuco_tui.lineage.index import (
    INDEX_FILE,
    CandidateIndex,
    CandidateSummary,
    Fingerprint,
    read_fingerprint,
    read_refs,
    rebuild_index,
)
from cuco_tui.lineage.message import commit_message
from cuco_tui.lineage.plumbing import commit_at, point_ref, read_blob, write_commit, write_tree
from cuco_tui.core.bounds import Bounds
from cuco_tui.core.machine import MachineInfo
from cuco_tui.core.ranking import best_measured
from cuco_tui.core.records import CandidateRecord

FORMAT = 1  # session.json "format"; bump when a reader of the old layout would go wrong
SESSION_FILE = "session.json"
MAIN = "refs/heads/main"
ROOT_TAG = "refs/tags/root"  # the root commit, holding session.json
BEST_TAG = "refs/tags/best"
BOUNDS_TAG = "refs/tags/bounds"  # a commit holding bounds.json (no record.json: not a candidate)
BOUNDS_FILE = "bounds.json"
MACHINE_TAG = "refs/tags/machine"  # a commit holding machine.json, for sessions recorded before session.json held it
MACHINE_FILE = "machine.json"
ENDED_TAG = "refs/tags/ended"  # a commit holding ended.json: why the last search of the session ended
ENDED_FILE = "ended.json"
CONFIG_TAG = "refs/tags/config"  # a commit holding config.json: the settings changed since session.json (update_config)
CONFIG_FILE = "config.json"
CANDIDATE_TAG = "refs/tags/"  # + the candidate id
ISLAND_PREFIX = "refs/heads/island-"
PROFILE_PREFIX = "refs/profiles/"  # + the candidate id: its newest profile (set_profile)
COMMITTER = Actor("cuco-tui", "cuco-tui@localhost")

_CANDIDATE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # also a valid tag name
_RESERVED_IDS = frozenset({"best", "root", "bounds", "machine", "ended", "config"})  # tags of their own
_ACTOR_UNSAFE = re.compile(r"[<>\n\r]+")


def _author(agent: str) -> Actor:
    name = _ACTOR_UNSAFE.sub(" ", agent).strip() or "unknown"
    email = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
    return Actor(name, f"{email}@cuco-tui")


def _read_info(repo: git.Repo, path: Path) -> dict[str, Any]:
    data = read_blob(repo, f"{ROOT_TAG}:{SESSION_FILE}")
    if data is None:
        raise SessionError(
            f"{path} holds a git repository but not a cuco session (no tag 'root' with "
            f"{SESSION_FILE}); choose another folder"
        )
    try:
        info = json.loads(data)
    except ValueError as e:
        raise SessionError(f"{path}: {SESSION_FILE} in the root commit is not JSON ({e})") from e
    if int(info.get("format", 0)) > FORMAT:
        raise SessionError(
            f"{path} was written by a newer cuco-tui (session format {info['format']}, this "
            f"version reads {FORMAT}); upgrade cuco-tui to open it"
        )
    return info


def _current_index(repo: git.Repo) -> tuple[CandidateIndex, Fingerprint]:
    """The session's index, rebuilt first if missing, unreadable or stale."""
    path = Path(repo.git_dir) / INDEX_FILE
    index = CandidateIndex.open(path)
    try:
        try:
            fp = read_fingerprint(repo)
            if index.fingerprint() != fp.digest:
                with index.writing():  # again under the lock: a writer may just have caught up
                    fp = read_fingerprint(repo)
                    if index.fingerprint() != fp.digest:
                        fp = rebuild_index(repo, index)
            return index, fp
        except sqlite3.DatabaseError:
            # Damaged past its header (SQLite reads pages lazily): start from an empty file.
            index.close()
            index = CandidateIndex.open(path, fresh=True)
            return index, rebuild_index(repo, index)
    except BaseException:
        index.close()
        raise


class SessionRepo:
    """One open session. Safe to share between threads (calls run one at a time). Writers in
    several processes take turns through the index's write lock, and each catches up with
    the others' commits before writing (`_sync`)."""

    def __init__(self, path: Path, repo: git.Repo, index: CandidateIndex, fp: Fingerprint, info: dict[str, Any]):
        # Use create() or open().
        self.path = path
        self._repo = repo
        self._index = index
        self._fp = fp
        self._info = info
        self._root = repo.commit(ROOT_TAG).hexsha
        self._lock = threading.RLock()
        self._stale = False  # True while git may hold a change the index does not
        self._remove_on_close: Path | None = None  # a bundle's temporary import (remove_on_close)
        self._imported_from: Path | None = None  # that bundle

    # ---- opening --------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, workload: str, config: dict[str, Any],
               machine: MachineInfo | None = None) -> "SessionRepo":
        """A new session; `machine`: what it runs on, recorded in session.json."""
        path = Path(path)
        if (path / ".git").exists():
            try:
                cls.open(path).close()
            except SessionError:
                raise SessionError(
                    f"{path} already holds a git repository that is not a cuco session; "
                    "choose another folder"
                ) from None
            raise SessionError(
                f"{path} already holds a session; open it (e.g. --resume) or choose a new folder"
            )
        info = {"format": FORMAT, "workload": workload, "config": config, "created": time.time()}
        if machine is not None:
            info["machine"] = machine.to_dict()
        try:
            text = dump_json(info)
        except (TypeError, ValueError) as e:
            raise SessionError(f"the session config for {workload} is not JSON data: {e}") from e
        path.mkdir(parents=True, exist_ok=True)
        git.Repo.init(path / ".git", bare=True, initial_branch="main").close()
        repo = git.Repo(path)
        try:
            tree = write_tree(repo, {SESSION_FILE: text.encode()})
            message = f"session {workload}\n\nWorkload: {workload}\nFormat: {FORMAT}\n"
            now = int(time.time())
            root = write_commit(repo, tree, [], message, COMMITTER, COMMITTER, now, now)
            point_ref(repo, MAIN, root)
            point_ref(repo, ROOT_TAG, root)
        finally:
            repo.close()
        return cls.open(path)

    @classmethod
    def open(cls, path: Path) -> "SessionRepo":
        """Open a session; rebuild its index if missing, unreadable or stale."""
        path = Path(path)
        if not (path / ".git").is_dir():
            raise SessionError(f"{path} is not a cuco session (it has no .git folder)")
        try:
            repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
            raise SessionError(f"{path} is not a cuco session (its .git is not a repository)") from e
        try:
            info = _read_info(repo, path)
            index, fp = _current_index(repo)
        except BaseException:
            repo.close()
            raise
        return cls(path, repo, index, fp, info)

    def close(self) -> None:
        with self._lock:
            self._index.close()
            self._repo.close()
            scratch, self._remove_on_close = self._remove_on_close, None
        if scratch is not None:  # a bundle imported only to be read: nothing of it outlives the reader
            shutil.rmtree(scratch, ignore_errors=True)

    def hold_for_exit(self, timeout: float) -> bool:
        """Let a write in progress end (up to `timeout`) and take the lock for good, for a process
        about to leave without unwinding (os._exit): a commit cut in half would leave a ref's lock
        file that the next run of the session could not get past. False when it could not."""
        return self._lock.acquire(timeout=timeout)

    def remove_on_close(self, folder: Path, imported_from: Path | None = None) -> None:
        """Delete `folder` (holding this session) when the repository is closed; `imported_from`:
        the bundle it was imported from."""
        self._remove_on_close = Path(folder)
        self._imported_from = Path(imported_from).absolute() if imported_from is not None else None

    @property
    def origin(self) -> Path:
        """What names this session to another process and to a person after the reader closes:
        the bundle a temporary import came from, else the session folder."""
        return self._imported_from or self.path

    @property
    def temporary(self) -> bool:
        """True for a session deleted when it is closed (a bundle imported only to be read):
        nothing written into it outlives the reader."""
        return self._remove_on_close is not None

    def __enter__(self) -> "SessionRepo":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def git_repo(self) -> git.Repo:
        """The underlying GitPython repository, for readers that need more than this class."""
        return self._repo

    def rebuild_index(self) -> int:
        """Rewrite the index from git; return the number of candidates found."""
        with self._lock:
            self._fp = rebuild_index(self._repo, self._index)
            self._stale = False
            return self._index.count()

    def _sync(self) -> None:
        """Under the index's write lock: make our fingerprint, the index and git agree. They
        part when another process wrote to the session, or a write of ours failed halfway."""
        stored = self._index.fingerprint()
        if not self._stale and stored == self._fp.digest:
            return
        fp = read_fingerprint(self._repo)
        if stored != fp.digest:
            fp = rebuild_index(self._repo, self._index)
        self._fp = fp
        self._stale = False

    def _fresh_index(self) -> CandidateIndex:
        if self._stale:
            with self._index.writing():
                self._sync()
        return self._index

    # ---- writing --------------------------------------------------------------------------

    def commit_candidate(self, record: CandidateRecord) -> str:
        """Commit a finished candidate (evaluated, or failed to produce code); return the
        commit sha. Candidates are immutable: each is committed once."""
        if not _CANDIDATE_ID.fullmatch(record.id) or record.id in _RESERVED_IDS:
            raise SessionError(
                f"candidate id {record.id!r} must be letters, digits, '_' or '-', start with a "
                "letter or digit, and not be one of the session's own tags (best, root, bounds, machine, ended)"
            )
        with self._lock:
            with self._index.writing():
                self._sync()
                parents = self._parent_commits(record)
                files = candidate_files(record)
                now = int(time.time())
                commit = write_commit(
                    self._repo,
                    write_tree(self._repo, files),
                    parents or [self._root],
                    commit_message(record),
                    author=_author(record.agent),
                    committer=COMMITTER,
                    author_time=int(record.created) if record.created > 0 else now,
                    commit_time=now,
                )
                # Until here only unreachable objects were written. The refs move before the
                # row is written: a kill in between leaves a commit the refs reach and the
                # index lacks; the index's fingerprint then differs from git's and the next
                # open rebuilds. Nothing committed is lost.
                self._stale = True
                tag = CANDIDATE_TAG + record.id
                point_ref(self._repo, tag, commit)
                point_ref(self._repo, MAIN, commit)
                fp = self._fp.moved(tag, commit.hexsha, new_commits=1)
                self._fp = fp.moved(MAIN, commit.hexsha)
                self._index.add(record, commit.hexsha, files[RECORD].decode(), self._fp)
            self._stale = False  # the transaction committed: the index holds the candidate
            return commit.hexsha

    def _parent_commits(self, record: CandidateRecord) -> list[str]:
        if self._index.has(record.id) or CANDIDATE_TAG + record.id in self._fp.refs:
            raise SessionError(
                f"candidate {record.id} is already in session {self.path}; candidates are committed once"
            )
        parents: list[str] = []
        for pid in record.parents:
            sha = self._index.commit_of(pid)
            if sha is None:
                raise SessionError(
                    f"candidate {record.id} names parent {pid}, which is not in session "
                    f"{self.path}; commit its parents first"
                )
            if sha not in parents:  # git keeps one edge per parent
                parents.append(sha)
        return parents

    def set_island_head(self, island: int, candidate_id: str) -> None:
        """Point refs/heads/island-<n> at the candidate."""
        self._move_ref(f"{ISLAND_PREFIX}{int(island)}", candidate_id)

    def set_best(self, candidate_id: str) -> None:
        """Point the lightweight tag `best` at the candidate (moved if it existed)."""
        self._move_ref(BEST_TAG, candidate_id)

    def set_bounds(self, bounds: Bounds) -> None:
        """Record the session's bounds: a commit holding bounds.json (its parent the root), named
        by the `bounds` tag (moved when measured again)."""
        machine = bounds.machine.describe() if bounds.machine is not None else "machine unknown"
        message = (f"bounds {bounds.workload}\n\nThe perfect-overlap bound of each bench shape, measured on "
                   f"{bounds.world} rank(s) of GPUs {','.join(map(str, bounds.gpus))}: {machine}.\n")
        self._tag_file(BOUNDS_TAG, BOUNDS_FILE, bounds.to_dict(), message)

    def _tag_file(self, tag: str, name: str, data: dict[str, Any], message: str) -> None:
        """A commit holding one JSON file (its parent the root, not a candidate) under `tag`."""
        self._ref_files(tag, {name: dump_json(data).encode()}, message, lambda: [self._root])

    def _ref_files(self, ref: str, files: dict[str, bytes], message: str, parents: Callable[[], list[str]]) -> None:
        """A commit holding `files` (no record.json: not a candidate) under `ref`, created or moved;
        its parents are asked for under the lock."""
        with self._lock:
            with self._index.writing():
                self._sync()
                tree = write_tree(self._repo, files)
                now = int(time.time())
                commit = write_commit(self._repo, tree, parents(), message, COMMITTER, COMMITTER, now, now)
                self._stale = True
                point_ref(self._repo, ref, commit)
                self._fp = self._fp.moved(ref, commit.hexsha, new_commits=1)
                self._index.set_fingerprint(self._fp)
            self._stale = False

    def set_profile(self, candidate_id: str, files: dict[str, bytes], message: str) -> None:
        """Keep a profile's files with a candidate (lineage/profiles.py writes them): a commit under
        refs/profiles/<id> whose parents are the candidate's commit and the profile it replaces, so
        `git show refs/profiles/c0042:profile.json` reads the newest and its log the earlier ones."""
        ref = PROFILE_PREFIX + candidate_id

        def parents() -> list[str]:
            before = read_refs(self._repo, ref).get(ref)
            return [self.commit_of(candidate_id)] + ([before] if before else [])

        self._ref_files(ref, files, message, parents)

    def profile_file(self, candidate_id: str, name: str) -> bytes | None:
        """A file of the candidate's newest profile (set_profile), None when it has none."""
        with self._lock:
            return read_blob(self._repo, f"{PROFILE_PREFIX}{candidate_id}:{name}")

    def set_machine(self, machine: MachineInfo, source: str) -> None:
        """Name the machine of a session that recorded none (made before session.json held it):
        a commit holding machine.json under the `machine` tag, saying where the facts come from
        (`source`); the candidates' commits stay as they were."""
        if self._info.get("machine"):
            raise SessionError(f"session {self.path} records its machine already; nothing to add")
        self._tag_file(MACHINE_TAG, MACHINE_FILE, {**machine.to_dict(), "source": source},
                       f"machine: {machine.describe()}\n\nAdded after the search, from {source}.\n")

    def set_ended(self, reason: str) -> None:
        """Why the session's search ended ("done", "stopped", "agent exhausted", ...: the engine's
        reason, core/ending.py); "" when a search (re)starts. Read by the session listing.
        Nothing is written when it says so already."""
        if reason == self.ended():
            return
        self._tag_file(ENDED_TAG, ENDED_FILE, {"reason": reason},
                       f"search {'ended: ' + reason if reason else 'started'}\n")

    def ended(self) -> str:
        """The reason `set_ended` recorded last, "" if none (or the search was started again)."""
        with self._lock:
            data = read_blob(self._repo, f"{ENDED_TAG}:{ENDED_FILE}")
        if data is None:
            return ""
        try:
            return str(json.loads(data).get("reason", ""))
        except (ValueError, AttributeError):
            return ""  # unreadable: listed as stopped, which a resume rewrites

    def update_config(self, changes: dict[str, Any]) -> None:
        """Change settings of the session's config for the searches after this one (a resume's
        higher --generations): session.json, in the root commit every candidate descends from,
        cannot change, so a commit holding config.json under the `config` tag carries every
        change so far, and session_info() reads the config through it. Nothing is written when
        the config says so already."""
        current = self.session_info().get("config") or {}
        changed = {k: v for k, v in changes.items() if k not in current or current[k] != v}
        if not changed:
            return
        text = ", ".join(f"{k} {v}" for k, v in changed.items())
        self._tag_file(CONFIG_TAG, CONFIG_FILE, {**self._config_changes(), **changed}, f"config: {text}\n")

    def _config_changes(self) -> dict[str, Any]:
        with self._lock:
            data = read_blob(self._repo, f"{CONFIG_TAG}:{CONFIG_FILE}")
        if data is None:
            return {}
        try:
            changes = json.loads(data)
        except ValueError:
            return {}  # unreadable: the config the session was started with, which the next change rewrites
        return changes if isinstance(changes, dict) else {}

    def _move_ref(self, refname: str, candidate_id: str) -> None:
        with self._lock:
            with self._index.writing():
                self._sync()
                sha = self.commit_of(candidate_id)
                self._stale = True
                point_ref(self._repo, refname, commit_at(self._repo, sha))
                self._fp = self._fp.moved(refname, sha)
                self._index.set_fingerprint(self._fp)
            self._stale = False

    # ---- reading --------------------------------------------------------------------------

    def session_info(self) -> dict[str, Any]:
        """session.json of the root commit: workload, config (with update_config's changes),
        created, format."""
        info = json.loads(json.dumps(self._info))  # a copy the caller may change
        changes = self._config_changes()
        if changes:
            info["config"] = {**(info.get("config") or {}), **changes}
        return info

    def machine(self) -> MachineInfo | None:
        """What the session was recorded on (session.json), else what a later `machine` tag says
        (set_machine: a session older than the record, annotated from the performance record),
        else what its bounds were measured on; None when nothing says."""
        stored = self._info.get("machine")
        if isinstance(stored, dict):
            return MachineInfo.from_dict(stored)
        with self._lock:
            data = read_blob(self._repo, f"{MACHINE_TAG}:{MACHINE_FILE}")
        if data is not None:
            return MachineInfo.from_dict(json.loads(data))
        bounds = self.bounds()
        return bounds.machine if bounds is not None else None

    def bounds(self) -> Bounds | None:
        """The bounds the search measured for this session, if it did (it needs a GPU)."""
        with self._lock:
            data = read_blob(self._repo, f"{BOUNDS_TAG}:{BOUNDS_FILE}")
        if data is None:
            return None
        try:
            return Bounds.from_dict(json.loads(data))
        except (ValueError, KeyError, TypeError) as e:
            raise SessionError(f"{self.path}: {BOUNDS_FILE} of the bounds tag cannot be read ({e})") from e

    def __len__(self) -> int:
        with self._lock:
            return self._fresh_index().count()

    def __contains__(self, candidate_id: object) -> bool:
        with self._lock:
            return isinstance(candidate_id, str) and self._fresh_index().has(candidate_id)

    def commit_of(self, candidate_id: str) -> str:
        with self._lock:
            sha = self._fresh_index().commit_of(candidate_id)
        if sha is None:
            raise SessionError(f"no candidate {candidate_id!r} in session {self.path}")
        return sha

    def records(self, with_source: bool = False) -> list[CandidateRecord]:
        """Every candidate, ordered by id, from the index. Their `source` is "" unless
        `with_source` (one git read per candidate); `source_of` reads one."""
        with self._lock:
            texts = self._fresh_index().record_texts()
        records = [record_from_json(t) for t in texts]
        if with_source:
            records = [record_from_json(t, self.source_of(r.id)) for t, r in zip(texts, records)]
        return records

    def record(self, candidate_id: str) -> CandidateRecord:
        """One candidate, whole (its source read from git)."""
        with self._lock:
            text = self._fresh_index().record_text(candidate_id)
        if text is None:
            raise SessionError(f"no candidate {candidate_id!r} in session {self.path}")
        return record_from_json(text, self.source_of(candidate_id))

    def children(self, candidate_id: str) -> list[str]:
        """Ids of the candidates that name this one as a parent, ordered by id."""
        with self._lock:
            return self._fresh_index().children(candidate_id)

    def source_of(self, candidate_id: str) -> str:
        sha = self.commit_of(candidate_id)
        with self._lock:
            data = read_blob(self._repo, f"{sha}:{SOURCE}")
        if data is None:
            raise SessionError(f"commit {sha} of candidate {candidate_id} has no {SOURCE}")
        return data.decode()

    def diff(self, a_id: str, b_id: str, context: int = 3) -> str:
        """Unified diff of candidate.cu from candidate a to candidate b."""
        a = self.source_of(a_id).splitlines()
        b = self.source_of(b_id).splitlines()
        lines = difflib.unified_diff(
            a, b, f"{a_id}/{SOURCE}", f"{b_id}/{SOURCE}", n=context, lineterm=""
        )
        return "\n".join(lines) + "\n" if a != b else ""

    def island_heads(self) -> dict[int, str]:
        """Island number -> id of the candidate its ref names (read from git: another process
        may be the one moving them)."""
        heads: dict[int, str] = {}
        with self._lock:
            index = self._fresh_index()
            for name, sha in read_refs(self._repo, "refs/heads/").items():
                number = name[len(ISLAND_PREFIX):]
                if name.startswith(ISLAND_PREFIX) and number.isdigit():
                    cid = index.id_of_commit(sha)
                    if cid is not None:
                        heads[int(number)] = cid
        return heads

    def best(self) -> str | None:
        """The candidate the `best` tag names, if any."""
        with self._lock:
            sha = read_refs(self._repo, BEST_TAG).get(BEST_TAG)
            return self._fresh_index().id_of_commit(sha) if sha else None

    def summaries(self) -> list[CandidateSummary]:
        """Every candidate's index columns, ordered by id: cheaper than records()."""
        with self._lock:
            return self._fresh_index().summaries()

    def best_measured(self) -> tuple[str, float] | None:
        """(id, speedup) of the best measured candidate, if any, as the search decides it
        (core/ranking.best_measured: faster than the one before beyond noise, a finalist through
        its confirmation): what the `best` tag of a search of this version names, and what
        `cuco sessions`, `cuco show`, `cuco export` and the screens name."""
        best = best_measured(self.records())
        return (best.id, best.speedup) if best is not None and best.speedup is not None else None

    def pack(self) -> None:
        """Pack the loose objects (`git gc`): each candidate adds about nine small files, so a
        long session is worth packing once it ends. Refs and index stay valid."""
        with self._lock:
            self._repo.git.gc("--quiet")

    def last_modified(self) -> float:
        """Unix time of the newest commit (main names it)."""
        with self._lock:
            return float(self._repo.commit(MAIN).committed_date)
