"""The novelty filter: a proposal that repeats a known candidate is not worth a compile and a
GPU run. Exact duplicates are found by a hash of the normalized code (comments and layout
removed); near-duplicates by a difflib ratio over the tokens of the normalized EVOLVE blocks,
among candidates that declare the same design. A change of a numeric literal (a tile size, a
chunk count) is tuning, not repetition, so two blocks whose numbers differ are never
near-duplicates."""

from __future__ import annotations

import difflib
import hashlib
import re
import threading
from dataclasses import dataclass
from typing import Any

from cuco_tui.source.regions import split_regions

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
_NUMBER = re.compile(r"\d[\w.]*")


def strip_comments(code: str) -> str:
    """Code without // and /* */ comments; string literals are kept intact."""
    out, pos = [], 0
    for m in re.finditer(rf"{_STRING.pattern}|{_COMMENT.pattern}", code, re.S):
        out.append(code[pos:m.start()])
        out.append(m.group(0) if m.group(0).startswith('"') else " ")
        pos = m.end()
    out.append(code[pos:])
    return "".join(out)


def normalize(code: str) -> str:
    """Comments removed, each line stripped and its runs of blanks collapsed, blank lines dropped."""
    lines = (" ".join(line.split()) for line in strip_comments(code).split("\n"))
    return "\n".join(line for line in lines if line)


def code_hash(code: str) -> str:
    return hashlib.sha256(normalize(code).encode()).hexdigest()


def evolve_text(code: str) -> str:
    """The normalized EVOLVE blocks (the whole file when it has none)."""
    blocks = split_regions(code).evolve
    return normalize("\n".join(b.text for b in blocks) if blocks else code)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class Verdict:
    novel: bool
    duplicate_of: str = ""  # the candidate it repeats
    similarity: float = 0.0
    reason: str = ""  # for people, when not novel


NOVEL = Verdict(True)


@dataclass(frozen=True)
class _Entry:
    id: str
    design: str
    tokens: tuple[str, ...]
    numbers: tuple[str, ...]


def _design_key(design: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in design.items()))


class NoveltyFilter:
    """Remembers every known candidate's code; `check` says whether a new one is novel."""

    def __init__(self, threshold: float = 0.999) -> None:
        self.threshold = threshold
        self._hashes: dict[str, str] = {}  # normalized-code hash -> first candidate id
        self._entries: list[_Entry] = []
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._hashes)

    def add(self, candidate_id: str, source: str, design: dict[str, Any]) -> None:
        """Remember a candidate's code (once per id; later calls for the same id are ignored)."""
        if not source or candidate_id in self._ids:
            return
        toks = tokens(evolve_text(source))
        entry = _Entry(candidate_id, _design_key(design), tuple(toks), tuple(t for t in toks if _NUMBER.fullmatch(t)))
        with self._lock:
            self._ids.add(candidate_id)
            self._hashes.setdefault(code_hash(source), candidate_id)
            self._entries.append(entry)

    def check(self, source: str, design: dict[str, Any]) -> Verdict:
        with self._lock:
            same = self._hashes.get(code_hash(source))
            entries = list(self._entries)
        if same:
            return Verdict(False, same, 1.0, f"the same code as {same} (once comments and layout are ignored)")
        toks = tokens(evolve_text(source))
        numbers = tuple(t for t in toks if _NUMBER.fullmatch(t))
        key = _design_key(design)
        for e in entries:
            if e.design != key or e.numbers != numbers:
                continue
            matcher = difflib.SequenceMatcher(None, e.tokens, toks, autojunk=False)
            if matcher.real_quick_ratio() < self.threshold or matcher.quick_ratio() < self.threshold:
                continue
            ratio = matcher.ratio()
            if ratio >= self.threshold:
                return Verdict(False, e.id, ratio,
                               f"a near-duplicate of {e.id}: the same design, the same constants, and "
                               f"{ratio:.2%} of its EVOLVE-block tokens")
        return NOVEL
