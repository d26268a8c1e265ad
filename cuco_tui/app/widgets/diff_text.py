"""A unified diff for a pane that wraps its lines: each line coloured by what it is (removed,
added, a hunk's head, a file's name), and where removed lines are followed by added ones that
resemble them, the characters that changed within each pair marked. A change at the end of a
long line (the design line's `chunk=8` becoming `chunk=2`) is then seen at any width: the line
wraps instead of being cut at the pane's edge, and the changed span stands out."""

from __future__ import annotations

from difflib import SequenceMatcher

from textual.content import Content, Span

REMOVED, ADDED = "$text-error", "$text-success"
CHANGED = "reverse bold"  # a changed span within a removed or added line
HUNK, FILE = "$text-accent", "bold"
SIMILAR = 0.5  # pairs less alike than this are shown whole, unmarked (a rewrite, not an edit)


def changed_spans(old: str, new: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The [start, end) spans of `old` and of `new` that differ, by characters; ([], []) when
    the two are too unlike for marks to help."""
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    if matcher.ratio() < SIMILAR:
        return [], []
    removed, added = [], []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag in ("replace", "delete") and a1 > a0:
            removed.append((a0, a1))
        if tag in ("replace", "insert") and b1 > b0:
            added.append((b0, b1))
    return removed, added


def _line(text: str, style: str, marks: list[tuple[int, int]] = ()) -> Content:
    # The marks are offsets into the line after its one-character +/- prefix.
    spans = [Span(0, len(text), style)] + [Span(start + 1, end + 1, CHANGED) for start, end in marks]
    return Content(text, spans)


def _kind(line: str) -> str:
    if line.startswith(("--- ", "+++ ")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"-": "removed", "+": "added"}.get(line[:1], "context")


def diff_content(diff: str) -> Content:
    """`diff` (unified, as git or difflib writes it) as Content whose lines wrap."""
    lines = diff.rstrip("\n").split("\n")
    out: list[Content] = []
    i = 0
    while i < len(lines):
        kind = _kind(lines[i])
        if kind == "removed":
            removed = []
            while i < len(lines) and _kind(lines[i]) == "removed":
                removed.append(lines[i])
                i += 1
            added = []
            while i < len(lines) and _kind(lines[i]) == "added":
                added.append(lines[i])
                i += 1
            marks_old: list[list[tuple[int, int]]] = [[] for _ in removed]
            marks_new: list[list[tuple[int, int]]] = [[] for _ in added]
            for k in range(min(len(removed), len(added))):  # the k-th removed line became the k-th added
                marks_old[k], marks_new[k] = changed_spans(removed[k][1:], added[k][1:])
            out += [_line(line, REMOVED, m) for line, m in zip(removed, marks_old)]
            out += [_line(line, ADDED, m) for line, m in zip(added, marks_new)]
            continue
        style = {"file": FILE, "hunk": HUNK, "added": ADDED}.get(kind, "")
        out.append(_line(lines[i], style) if style else Content(lines[i]))
        i += 1
    return Content("\n").join(out)
