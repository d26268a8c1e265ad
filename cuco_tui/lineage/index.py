"""The SQLite index of a session's candidates, at `.git/cuco-index.sqlite` so it is never
committed. It is a cache of what the commits reachable from the refs hold: it remembers the
fingerprint of the refs it was built from, and is rebuilt from git whenever that differs."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import git

from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.files import RECORD, record_from_json
from cuco_tui.lineage.plumbing import read_blob
from cuco_tui.core.records import CandidateRecord

INDEX_FILE = "cuco-index.sqlite"
SCHEMA_VERSION = "2"  # 2: statuses as this version reads them (verified, exhausted)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY,
    commit_sha TEXT NOT NULL,
    generation INTEGER NOT NULL,
    island INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    speedup REAL,
    latency_ms REAL,
    agent TEXT NOT NULL,
    cost_usd REAL NOT NULL,
    parents TEXT NOT NULL,
    design TEXT NOT NULL,
    created REAL NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_commit ON candidates(commit_sha);
CREATE TABLE IF NOT EXISTS edges (
    parent TEXT NOT NULL,
    child TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (child, position)
);
CREATE INDEX IF NOT EXISTS edges_parent ON edges(parent);
"""


_HASH_SPACE = 1 << 256


def _ref_term(refname: str, sha: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{refname} {sha}".encode()).digest(), "big")


@dataclass(frozen=True)
class Fingerprint:
    """What the index was built from: every ref and the number of commits they reach. Any
    commit made or ref moved without the index knowing changes it.

    The refs are hashed as a sum of per-ref hashes, so that moving one ref (every commit
    adds a candidate tag) updates it in constant time however many refs a session has."""

    refs: dict[str, str]  # refname -> sha; never changed in place
    commits: int
    refs_hash: int

    @classmethod
    def of(cls, refs: dict[str, str], commits: int) -> "Fingerprint":
        total = sum(_ref_term(name, sha) for name, sha in refs.items()) % _HASH_SPACE
        return cls(dict(refs), commits, total)

    @property
    def digest(self) -> str:
        return f"{self.refs_hash:064x}-{self.commits}"

    def moved(self, refname: str, sha: str, new_commits: int = 0) -> "Fingerprint":
        total = self.refs_hash
        old = self.refs.get(refname)
        if old is not None:
            total -= _ref_term(refname, old)
        total = (total + _ref_term(refname, sha)) % _HASH_SPACE
        refs = dict(self.refs)
        refs[refname] = sha
        return Fingerprint(refs, self.commits + new_commits, total)


@dataclass(frozen=True)
class CandidateSummary:
    """The index's columns for one candidate: what a list or a lineage tree shows, without
    parsing the record's result and logs."""

    id: str
    commit: str
    generation: int
    island: int
    kind: str
    status: str
    speedup: float | None
    latency_ms: float | None
    agent: str
    cost_usd: float
    parents: tuple[str, ...]
    design: dict[str, Any]
    created: float


def read_refs(repo: git.Repo, *patterns: str) -> dict[str, str]:
    """refname -> sha for every ref (or those under `patterns`, e.g. 'refs/heads/')."""
    out = repo.git.for_each_ref("--format=%(refname) %(objectname)", *patterns)
    pairs = (line.split(" ", 1) for line in out.splitlines() if line.strip())
    return {name: sha for name, sha in pairs}


def read_fingerprint(repo: git.Repo) -> Fingerprint:
    refs = read_refs(repo)
    # --all: every ref and HEAD, which names main: the same commits the refs reach.
    count = int(repo.git.rev_list("--count", "--all")) if refs else 0
    return Fingerprint.of(refs, count)


def _row(record: CandidateRecord, commit_sha: str, record_text: str) -> tuple:
    return (
        record.id,
        commit_sha,
        record.generation,
        record.island,
        record.kind,
        record.status,
        record.speedup,
        record.latency_ms,
        record.agent,
        record.cost_usd,
        json.dumps(list(record.parents)),
        json.dumps(record.design, sort_keys=True),
        record.created,
        record_text,
    )


class CandidateIndex:
    """One SQLite connection. Threads of one process serialize their calls (SessionRepo holds
    a lock); processes serialize their writes through SQLite's write lock (`writing`)."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: Path, fresh: bool = False) -> "CandidateIndex":
        """Open or create the index. A file SQLite cannot read, or of another schema, is
        replaced by an empty one (as is any file, if `fresh`): the caller then finds no
        fingerprint and rebuilds."""
        if not fresh:
            try:
                return cls(path, _connect(path))
            except sqlite3.DatabaseError:
                pass
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return cls(path, _connect(path))

    def close(self) -> None:
        self._conn.close()

    # ---- writes ---------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction that holds SQLite's write lock from its start, so a writer
        can move git refs and record them here with no other process in between. Nested
        uses join the outer transaction."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def add(self, record: CandidateRecord, commit_sha: str, record_text: str, fp: Fingerprint) -> None:
        """The candidate's row and the fingerprint that now includes its commit, together."""
        with self.writing():
            self._insert(record, commit_sha, record_text)
            self._set_meta("fingerprint", fp.digest)

    def set_fingerprint(self, fp: Fingerprint) -> None:
        with self.writing():
            self._set_meta("fingerprint", fp.digest)

    def replace_all(self, entries: Iterable[tuple[CandidateRecord, str, str]], fp: Fingerprint) -> int:
        """Replace every row with `entries` ((record, commit sha, record.json text)) in one
        transaction, so a reader never sees a half-built index."""
        n = 0
        with self.writing():
            self._conn.execute("DELETE FROM candidates")
            self._conn.execute("DELETE FROM edges")
            for record, commit_sha, text in entries:
                self._insert(record, commit_sha, text)
                n += 1
            self._set_meta("fingerprint", fp.digest)
        return n

    def _insert(self, record: CandidateRecord, commit_sha: str, record_text: str) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO candidates VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            _row(record, commit_sha, record_text),
        )
        self._conn.execute("DELETE FROM edges WHERE child = ?", (record.id,))
        self._conn.executemany(
            "INSERT INTO edges VALUES (?,?,?)",
            [(p, record.id, i) for i, p in enumerate(record.parents)],
        )

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ---- reads ----------------------------------------------------------------------------

    def fingerprint(self) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        return row[0] if row else None

    def count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]

    def has(self, candidate_id: str) -> bool:
        return self.commit_of(candidate_id) is not None

    def commit_of(self, candidate_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT commit_sha FROM candidates WHERE id = ?", (candidate_id,)
        ).fetchone()
        return row[0] if row else None

    def id_of_commit(self, commit_sha: str) -> str | None:
        row = self._conn.execute(
            "SELECT id FROM candidates WHERE commit_sha = ?", (commit_sha,)
        ).fetchone()
        return row[0] if row else None

    def record_text(self, candidate_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT record FROM candidates WHERE id = ?", (candidate_id,)
        ).fetchone()
        return row[0] if row else None

    def record_texts(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT record FROM candidates ORDER BY id")]

    def summaries(self) -> list[CandidateSummary]:
        rows = self._conn.execute(
            "SELECT id, commit_sha, generation, island, kind, status, speedup, latency_ms, agent,"
            " cost_usd, parents, design, created FROM candidates ORDER BY id"
        )
        return [
            CandidateSummary(*r[:10], parents=tuple(json.loads(r[10])), design=json.loads(r[11]), created=r[12])
            for r in rows
        ]

    def children(self, candidate_id: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT DISTINCT child FROM edges WHERE parent = ? ORDER BY child", (candidate_id,)
        )
        return [r[0] for r in rows]


def _connect(path: Path) -> sqlite3.Connection:
    # check_same_thread=False: the engine and the TUI call from worker threads; SessionRepo's
    # lock keeps calls one at a time. isolation_level=None: transactions are ours (writing()).
    # timeout: another process may hold the write lock through a whole rebuild (seconds).
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=60.0)
    try:
        # WAL lets a reader (the TUI, `cuco sessions`) read while the engine writes. The index
        # is rebuildable, so commits need not wait for fsync.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if _schema_version(conn) == SCHEMA_VERSION:
            return conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _schema_version(conn)  # again, now that no other process can change it
            if version not in (None, SCHEMA_VERSION):
                for table in ("candidates", "edges", "meta"):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return conn
    except BaseException:
        conn.close()
        raise


def _schema_version(conn: sqlite3.Connection) -> str | None:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    return row[0] if row else "unknown"


def committed_records(repo: git.Repo) -> tuple[Fingerprint, list[tuple[CandidateRecord, str, str]]]:
    """Every candidate commit reachable from any ref, as (record without source, commit sha,
    record.json text), and the fingerprint of exactly what was walked. One commit per
    candidate id (a session refuses a second commit of an id; should one exist anyway, the
    newer commit, first in rev-list order, wins)."""
    refs = read_refs(repo)
    shas = repo.git.rev_list("--all").split() if refs else []
    walked = Fingerprint.of(refs, len(shas))
    seen: dict[str, tuple[CandidateRecord, str, str]] = {}
    for sha in shas:
        data = read_blob(repo, f"{sha}:{RECORD}")
        if data is None:  # the root commit, or a commit cuco did not make
            continue
        text = data.decode()
        try:
            record = record_from_json(text)
        except (ValueError, KeyError, TypeError) as e:
            # Loud, not skipped: skipping would drop a committed candidate from every view.
            raise SessionError(f"commit {sha} holds a {RECORD} this cuco-tui cannot read: {e}") from e
        seen.setdefault(record.id, (record, sha, text))
    return walked, list(seen.values())


def rebuild_index(repo: git.Repo, index: CandidateIndex) -> Fingerprint:
    """Rewrite `index` from the commits reachable from any ref of `repo`; return the
    fingerprint it now holds. The refs are read under the index's write lock, so a writer in
    another process cannot commit between the walk and the rewrite."""
    with index.writing():
        walked, entries = committed_records(repo)
        index.replace_all(entries, walked)
    return walked
