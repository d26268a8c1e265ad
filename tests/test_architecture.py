"""docs/architecture.md's floor chart is the truth of the package's imports (issue 30 item 7).

The chart is read from the doc (the `floor N   room/ (what) ...` lines) and the imports from the
package's source (ast: every `import` and `from ... import`, relative ones resolved, those inside
functions included). Every import points down the floors, and each room stands exactly one floor
above the highest room it imports (floor 0 when it imports none), so the chart says both what may
import what and what does."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from repo_paths import REPO

PACKAGE = REPO / "cuco_tui"
DOC = REPO / "docs" / "architecture.md"
FLOOR_LINE = re.compile(r"^floor (\d+)\s+(.*)$")


def chart(text: str) -> dict[str, int]:
    """room -> floor, from the doc's chart (what a line says in parentheses is not a room)."""
    floors: dict[str, int] = {}
    for line in text.splitlines():
        m = FLOOR_LINE.match(line)
        if not m:
            continue
        for room in re.findall(r"(\w+)/", re.sub(r"\([^)]*\)", "", m.group(2))):
            assert room not in floors, f"the chart draws {room}/ twice"
            floors[room] = int(m.group(1))
    return floors


def rooms(package: Path) -> set[str]:
    return {p.stem for p in package.iterdir()
            if (p.is_dir() and (p / "__init__.py").is_file()) or (p.suffix == ".py" and p.stem != "__init__")}


def imports(package: Path) -> dict[tuple[str, str], list[str]]:
    """(room, room it imports) -> the files that do, for every import between two rooms."""
    name = package.name
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        parts = module.split(".")
        if len(parts) < 2 or parts[1] == "__init__":
            continue
        here = parts if path.name == "__init__.py" else parts[:-1]  # the package a relative import starts in
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = here[:len(here) - (node.level - 1)]
                targets = [".".join(base + node.module.split("."))] if node.module else \
                    [".".join(base + [alias.name]) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            else:
                continue
            for target in targets:
                t = target.split(".")
                if t[0] == name and len(t) > 1 and t[1] != parts[1]:
                    found.setdefault((parts[1], t[1]), []).append(str(path.relative_to(package.parent)))
    return found


def test_the_chart_draws_every_room_once():
    drawn = chart(DOC.read_text())
    assert set(drawn) == rooms(PACKAGE), "rooms missing from the chart or drawn but not in cuco_tui/"


def test_every_import_points_down_the_floors():
    drawn = chart(DOC.read_text())
    upward = [f"{files[0]} imports {to}/ (floor {drawn[to]}) from {room}/ (floor {drawn[room]})"
              for (room, to), files in sorted(imports(PACKAGE).items()) if drawn[to] >= drawn[room]]
    assert upward == []


def test_each_room_stands_one_floor_above_the_highest_it_imports():
    drawn = chart(DOC.read_text())
    below: dict[str, int] = {}
    for room, to in imports(PACKAGE):
        below[room] = max(below.get(room, -1), drawn[to])
    wrong = [f"{room}/ is drawn on floor {floor}; its imports put it on floor {below.get(room, -1) + 1}"
             for room, floor in sorted(drawn.items()) if floor != below.get(room, -1) + 1]
    assert wrong == []


def test_an_import_inside_a_function_counts(tmp_path):
    # the guard itself: a room that imports upward only inside a function is still caught
    for room, body in {"low": "def f():\n    from pkg.high import x\n", "high": "x = 1\n"}.items():
        (tmp_path / "pkg" / room).mkdir(parents=True)
        (tmp_path / "pkg" / room / "__init__.py").write_text(body)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "high" / "rel.py").write_text("from ..low import f\n")
    assert imports(tmp_path / "pkg") == {("low", "high"): ["pkg/low/__init__.py"],
                                         ("high", "low"): ["pkg/high/rel.py"]}


@pytest.mark.parametrize("line, drawn", [
    ("floor 2   design/ (space, classify/, context)    workload/ (loading)", {"design": 2, "workload": 2}),
    ("floor 0   core/ (record and ids)", {"core": 0}),
    ("             │ search's public API", {}),
])
def test_the_chart_is_read_as_drawn(line, drawn):
    assert chart(line) == drawn


def _child_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "subprocess"
            and n.func.attr in ("run", "Popen", "check_output", "check_call", "call")]


def test_every_child_process_gets_the_environment_with_multicast_off():
    # NVLink multicast stays off in every process cuco starts (harness/env.py child_env): a child
    # started with the caller's bare environment could turn it on for a GPU program it runs.
    missing = []
    for path in sorted((REPO / "cuco_tui").rglob("*.py")):
        tree = ast.parse(path.read_text())
        calls = _child_calls(tree)
        if not calls:
            continue
        takes_env = all(any(k.arg == "env" for k in c.keywords) for c in calls)
        if not takes_env or "child_env" not in path.read_text():
            missing.append(str(path.relative_to(REPO)))
    assert not missing, f"child processes without harness.env.child_env: {missing}"
