"""Turning a model's reply into a candidate: SEARCH/REPLACE edits or a full rewrite of the
EVOLVE blocks, applied to the parent's frozen skeleton.

Two reply formats:

- edits (`apply_diffs`): one or more blocks

      <<<<<<< SEARCH
      (exact lines of the parent)
      =======
      (replacement)
      >>>>>>> REPLACE

  Every SEARCH quotes the parent as it was shown to the model (edits do not see each other's
  output), must match it exactly once (a second try ignores trailing whitespace), and the lines
  it actually changes must lie inside one EVOLVE block; an edit that touches a frozen line is
  refused with a sentence naming the line. Context lines a SEARCH shares with its REPLACE at the
  start or end are not "changed", so quoting a marker line as context is fine.

- full rewrite (`apply_full`): a fenced code block (```cuda, ```cpp, ```c++, ...) holding the
  EVOLVE blocks with their markers, either the whole file or just the blocks. Only the bodies
  of the blocks are taken; they replace the parent's, one for one, and the parent's frozen text
  stays as it is.

Either way the result goes through the `screen` given (the cascade's L0 against the workload
seed, handed in by agents/factory.py) as the final word; without one it is not screened here,
and the cascade's L0 still judges it.
Nothing here raises on a bad reply: every problem comes back as `EditResult.error`, one or two
sentences a person (and the model, next round) can act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from cuco_tui.agents.base import StaticScreen
from cuco_tui.core.result import StaticVerdict
from cuco_tui.source.regions import split_regions

__all__ = [
    "EditResult",
    "DiffBlock",
    "CodeFence",
    "parse_diffs",
    "parse_fences",
    "apply_diffs",
    "apply_full",
    "explanation_of",
    "has_diff_blocks",
    "truncation_error",
]

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE_OPEN = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([A-Za-z0-9_+#.\-]*)[^`]*$")
_MARKER = re.compile(r"^\s*//\s*EVOLVE-BLOCK-(START|END)\b")
CODE_LANGS = frozenset({"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", ""})
_MAX_ERRORS_SHOWN = 3


@dataclass(frozen=True)
class EditResult:
    """What applying a reply gave: the whole new candidate (`source`), or an `error` sentence and
    `source == ""`. `applied` counts the edits (or blocks) that went in. `draft` is the edited
    text even when the static checks refused it (for people to inspect; "" when nothing could be
    applied); `notes` are warnings that did not stop it (fallbacks used, static-check warnings)."""

    source: str = ""
    applied: int = 0
    error: str = ""
    draft: str = ""
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.source)


# ---------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class DiffBlock:
    index: int  # 1-based, in reply order
    search: tuple[str, ...]
    replace: tuple[str, ...]
    reply_line: int  # the line of the reply where its SEARCH marker is


@dataclass(frozen=True)
class CodeFence:
    lang: str
    lines: tuple[str, ...]
    reply_line: int  # the line of the reply where it opens
    closed: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def has_markers(self) -> bool:
        return any(_MARKER.match(line) for line in self.lines)


def _reply_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def parse_diffs(reply: str) -> tuple[list[DiffBlock], str]:
    """The SEARCH/REPLACE blocks of a reply, and an error sentence when one is malformed or left
    open (a reply cut off in the middle of a block)."""
    blocks: list[DiffBlock] = []
    state = "text"
    search: list[str] = []
    replace: list[str] = []
    opened = 0
    for no, line in enumerate(_reply_lines(reply), start=1):
        if state == "text":
            if _SEARCH.match(line):
                state, search, replace, opened = "search", [], [], no
            elif _DIVIDER.match(line) or _REPLACE.match(line):
                pass  # a stray divider in prose: not an edit
            continue
        n = len(blocks) + 1
        if _SEARCH.match(line):
            want = "=======" if state == "search" else ">>>>>>> REPLACE"
            return blocks, (f"edit {n} (reply line {opened}) has no `{want}` line before the next "
                            f"`<<<<<<< SEARCH` at reply line {no}; every edit needs SEARCH, `=======`, REPLACE")
        if state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            elif _REPLACE.match(line):
                return blocks, (f"edit {n} (reply line {opened}) reaches `>>>>>>> REPLACE` without a "
                                f"`=======` line between the SEARCH and the replacement text")
            else:
                search.append(line)
        else:
            if _REPLACE.match(line):
                blocks.append(DiffBlock(n, tuple(search), tuple(replace), opened))
                state = "text"
            else:
                replace.append(line)
    if state != "text":
        n = len(blocks) + 1
        want = "=======" if state == "search" else ">>>>>>> REPLACE"
        return blocks, (f"the reply ends inside edit {n} (opened at reply line {opened}, no `{want}` line "
                        f"after it): the reply was cut off, so no edit was applied")
    return blocks, ""


def has_diff_blocks(reply: str) -> bool:
    return any(_SEARCH.match(line) for line in _reply_lines(reply))


def parse_fences(reply: str) -> list[CodeFence]:
    """The fenced code blocks of a reply, in order; the last one may be unclosed (cut off)."""
    fences: list[CodeFence] = []
    lines = _reply_lines(reply)
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        close = re.compile(r"^\s{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(lines[j])
            j += 1
        fences.append(CodeFence(lang, tuple(body), i + 1, j < len(lines)))
        i = j + 1
    return fences


def truncation_error(stop_reason: str | None, max_tokens: int | None = None) -> str:
    if stop_reason != "max_tokens":
        return ""
    limit = f" ({max_tokens} tokens)" if max_tokens else ""
    return (f"the reply was cut off at the max_tokens limit{limit} before it finished (stop_reason max_tokens), "
            f"so none of its code was used; ask for a shorter answer or raise max_tokens")


def explanation_of(reply: str) -> str:
    """The model's words outside its code: the reply without fenced code blocks and without
    SEARCH/REPLACE blocks, blank runs collapsed."""
    out: list[str] = []
    lines = _reply_lines(reply)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE_OPEN.match(line)
        if m:
            fence = m.group(1)
            close = re.compile(r"^\s{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
            j = i + 1
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            i = j + 1
            continue
        if _SEARCH.match(line):
            j = i + 1
            while j < len(lines) and not _REPLACE.match(lines[j]):
                j += 1
            i = j + 1
            continue
        out.append(line.rstrip())
        i += 1
    text = "\n".join(out).strip()
    return re.sub(r"\n{3,}", "\n\n", text)


# ---------------------------------------------------------------------------- helpers


def _file_lines(text: str) -> tuple[list[str], bool]:
    """Lines as the static checks count them (split on '\\n'), and whether the text ended in one."""
    lines = text.split("\n")
    trailing = bool(lines) and lines[-1] == ""
    if trailing:
        lines.pop()
    return lines, trailing


def _join(lines: list[str], trailing: bool) -> str:
    return "\n".join(lines) + ("\n" if trailing else "")


def _show(text: str, width: int = 90) -> str:
    t = text.strip()
    if len(t) > width:
        t = t[: width - 3] + "..."
    return f"`{t}`" if t else "a blank line"


def _block_spans(regions) -> list[tuple[int, int]]:
    return [(r.start_line, r.end_line) for r in regions.evolve]


def _spans_text(spans: list[tuple[int, int]]) -> str:
    parts = [f"{a}-{b}" if b >= a else f"empty at line {a}" for a, b in spans]
    if len(parts) == 1:
        return f"the EVOLVE block is lines {parts[0]}"
    return "the EVOLVE blocks are lines " + ", ".join(parts)


def _final(source: str, seed: str, file_name: str, applied: int, notes: list[str],
           screen: StaticScreen | None) -> EditResult:
    verdict = screen(source, seed, file_name) if screen is not None else StaticVerdict()
    if verdict.rejected:
        errors = verdict.errors
        shown = "; ".join(_one_line(d.render()) for d in errors[:_MAX_ERRORS_SHOWN])
        more = f" (and {len(errors) - _MAX_ERRORS_SHOWN} more)" if len(errors) > _MAX_ERRORS_SHOWN else ""
        return EditResult("", applied, f"the edited candidate fails the static checks (L0): {shown}{more}",
                          draft=source, notes=tuple(notes))
    notes = notes + [_one_line(d.render()) for d in verdict.diagnostics]  # warnings only
    return EditResult(source, applied, "", draft=source, notes=tuple(notes))


def _one_line(text: str) -> str:
    first, *rest = text.split("\n")
    src = next((r.strip() for r in rest if r.strip() and r.strip() != "^"), "")
    return f"{first} [{src}]" if src else first


def _find(hay: list[str], needle: list[str], norm: Callable[[str], str]) -> list[int]:
    n = len(needle)
    if n == 0 or n > len(hay):
        return []
    want = [norm(x) for x in needle]
    got = [norm(x) for x in hay]
    return [i for i in range(len(hay) - n + 1) if got[i:i + n] == want]


def _no_match_hint(parent: list[str], search: list[str]) -> str:
    """Why a SEARCH does not match: where its first line is found and where it stops matching."""
    first = next((k for k, s in enumerate(search) if s.strip()), None)
    if first is None:
        return ""
    key = search[first].strip()
    starts = [i for i, line in enumerate(parent) if line.strip() == key]
    if not starts:
        return f"; its line {_show(search[first])} is not in the parent"
    best, best_len = starts[0], -1
    for i in starts:
        k = 0
        while (first + k < len(search) and i + k < len(parent)
               and parent[i + k].strip() == search[first + k].strip()):
            k += 1
        if k > best_len:
            best, best_len = i, k
    at = first + best_len
    if at >= len(search):
        return "; it matches only when leading whitespace is ignored: copy the parent's indentation exactly"
    pline = best + best_len
    parent_text = _show(parent[pline]) if pline < len(parent) else "the end of the file"
    return (f"; it follows the parent from line {best + 1} but its line {_show(search[at])} differs from "
            f"parent line {pline + 1} ({parent_text})")


# ---------------------------------------------------------------------------- SEARCH/REPLACE


def apply_diffs(parent_source: str, reply_text: str, *, seed: str | None = None, file_name: str = "candidate.cu",
                stop_reason: str | None = None, max_tokens: int | None = None,
                screen: StaticScreen | None = None) -> EditResult:
    """Apply the reply's SEARCH/REPLACE edits to the parent. `seed` is the workload seed the
    `screen` compares the frozen text against (the parent when not given)."""
    truncated = truncation_error(stop_reason, max_tokens)
    if truncated:
        return EditResult(error=truncated)
    blocks, parse_error = parse_diffs(reply_text)
    if parse_error:
        return EditResult(error=parse_error)
    if not blocks:
        has_code = any(f.lines for f in parse_fences(reply_text))
        what = "a code block but no" if has_code else "no code and no"
        return EditResult(error=(f"the reply holds {what} SEARCH/REPLACE edits: expected one or more blocks "
                                 f"`<<<<<<< SEARCH` (exact lines of the parent) `=======` (replacement) "
                                 f"`>>>>>>> REPLACE`"))
    parent, trailing = _file_lines(parent_source)
    regions = split_regions(parent_source)
    if not regions.ok:
        return EditResult(error=f"the parent's EVOLVE-BLOCK markers are malformed ({regions.diagnostics[0].message}); "
                                f"no edit can be placed")
    spans = _block_spans(regions)
    evolve_lines = {no for a, b in spans for no in range(a, b + 1)}

    notes: list[str] = []
    planned: list[tuple[int, int, int, list[str], int]] = []  # (start, end, index, new lines, match pos)
    matched: list[tuple[int, int, int]] = []  # (pos, end, index) of the whole SEARCH
    for blk in blocks:
        i = blk.index
        search, replace = list(blk.search), list(blk.replace)
        if not any(s.strip() for s in search):
            return EditResult(error=(f"edit {i} has an empty SEARCH section; quote the exact lines of the parent "
                                     f"that the edit replaces (or that the new code goes next to)"))
        hits = _find(parent, search, lambda s: s)
        if not hits:
            hits = _find(parent, search, str.rstrip)
            if len(hits) == 1:
                notes.append(f"edit {i} matched the parent only when trailing whitespace is ignored")
        if not hits:
            return EditResult(error=(f"edit {i}'s SEARCH text does not match the parent"
                                     f"{_no_match_hint(parent, search)}; SEARCH must copy lines of the parent "
                                     f"exactly"))
        if len(hits) > 1:
            where = ", ".join(str(h + 1) for h in hits[:5])
            return EditResult(error=(f"edit {i}'s SEARCH text matches the parent {len(hits)} times (at lines "
                                     f"{where}); include more surrounding lines so that it matches exactly once"))
        pos = hits[0]
        # The lines the edit really changes: drop the context it keeps at either end.
        k = 0
        while k < len(search) and k < len(replace) and search[k].rstrip() == replace[k].rstrip():
            k += 1
        s = 0
        while (s < len(search) - k and s < len(replace) - k
               and search[len(search) - 1 - s].rstrip() == replace[len(replace) - 1 - s].rstrip()):
            s += 1
        start, end = pos + k, pos + len(search) - s  # 0-based, end exclusive: parent lines replaced
        new = replace[k:len(replace) - s]
        if start == end and not new:
            notes.append(f"edit {i} changes nothing (its SEARCH and REPLACE are the same)")
            continue
        if start < end:
            outside = [no for no in range(start + 1, end + 1) if no not in evolve_lines]
            if outside:
                no = outside[0]
                return EditResult(error=(f"edit {i} changes line {no}, outside the EVOLVE blocks; only code between "
                                         f"the markers may change (line {no} is {_show(parent[no - 1])}; "
                                         f"{_spans_text(spans)})"))
        else:
            at = start + 1  # the new lines go before parent line `at`
            if not any(a <= at <= b + 1 for a, b in spans):
                return EditResult(error=(f"edit {i} inserts code after line {at - 1}, outside the EVOLVE blocks; "
                                         f"only code between the markers may change ({_spans_text(spans)})"))
        for p, e, j in matched:
            if pos < e and p < pos + len(search):
                return EditResult(error=(f"edits {j} and {i} overlap (both quote line {max(p, pos) + 1} of the "
                                         f"parent); merge them into one edit"))
        matched.append((pos, pos + len(search), i))
        planned.append((start, end, i, new, pos))
    if not planned:
        return EditResult(error="the edits change nothing: every SEARCH equals its REPLACE", notes=tuple(notes))
    lines = list(parent)
    for start, end, _, new, _ in sorted(planned, key=lambda p: (p[0], p[1]), reverse=True):
        lines[start:end] = new
    return _final(_join(lines, trailing), seed if seed is not None else parent_source, file_name, len(planned), notes,
                  screen)


# ---------------------------------------------------------------------------- full rewrite


def _code_of(reply_text: str) -> tuple[list[str] | None, str]:
    """The code lines of a full-rewrite reply (the fence with the EVOLVE markers), or an error."""
    fences = parse_fences(reply_text)
    open_fence = next((f for f in fences if not f.closed), None)
    if open_fence is not None:
        return None, (f"the reply ends inside a code block (opened at reply line {open_fence.reply_line}, never "
                      f"closed): the reply was cut off, so none of its code was used")
    with_markers = [f for f in fences if f.has_markers]
    if with_markers:
        code_like = [f for f in with_markers if f.lang in CODE_LANGS] or with_markers
        return list(code_like[-1].lines), ""
    if fences and any(f.lines for f in fences):
        return None, ("the code block in the reply has no EVOLVE-BLOCK markers: return every EVOLVE block with its "
                      "`// EVOLVE-BLOCK-START` and `// EVOLVE-BLOCK-END` lines inside one ```cuda code block")
    lines = _reply_lines(reply_text)
    if any(_MARKER.match(line) for line in lines):
        return lines, ""  # markers without a fence: the blocks are still unambiguous
    return None, ("the reply holds no code: expected one ```cuda code block holding the EVOLVE blocks with their "
                  "`// EVOLVE-BLOCK-START` / `// EVOLVE-BLOCK-END` markers")


def apply_full(parent_source: str, reply_text: str, *, seed: str | None = None, file_name: str = "candidate.cu",
               stop_reason: str | None = None, max_tokens: int | None = None,
               screen: StaticScreen | None = None) -> EditResult:
    """Put the EVOLVE-block bodies of the reply's code into the parent's frozen skeleton."""
    truncated = truncation_error(stop_reason, max_tokens)
    if truncated:
        return EditResult(error=truncated)
    code, error = _code_of(reply_text)
    if code is None:
        return EditResult(error=error)
    parent_regions = split_regions(parent_source)
    if not parent_regions.ok:
        return EditResult(error=f"the parent's EVOLVE-BLOCK markers are malformed "
                                f"({parent_regions.diagnostics[0].message}); no rewrite can be placed")
    code_text = "\n".join(code) + "\n"
    regions = split_regions(code_text, "reply")
    if not regions.ok:
        return EditResult(error=f"the EVOLVE-BLOCK markers in the reply's code are malformed: "
                                f"{regions.diagnostics[0].message.replace('line', 'code line', 1)}")
    want, got = len(parent_regions.evolve), len(regions.evolve)
    if got != want:
        return EditResult(error=(f"the reply's code has {got} EVOLVE block{'s' if got != 1 else ''} but the parent "
                                 f"has {want}; return every EVOLVE block, in order, each with its markers"))
    notes: list[str] = []
    # Text outside the blocks in the reply is ignored; say so when it differs from the parent's.
    reply_frozen = [line.strip() for r in regions.frozen for line in r.text.split("\n") if line.strip()]
    if reply_frozen:
        parent_frozen = [line.strip() for r in parent_regions.frozen for line in r.text.split("\n") if line.strip()]
        if reply_frozen != parent_frozen:
            notes.append("the reply's text outside the EVOLVE blocks differs from the parent's and was ignored "
                         "(only the blocks' code is used)")
    lines, trailing = _file_lines(parent_source)
    for old, new in reversed(list(zip(parent_regions.evolve, regions.evolve))):
        body = new.text.split("\n") if new.text else []
        lines[old.start_line - 1:old.end_line] = body
    return _final(_join(lines, trailing), seed if seed is not None else parent_source, file_name, want, notes,
                  screen)
