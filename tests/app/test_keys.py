"""One key, one meaning on every screen, and every key's action in the command palette (^p): the
key map the README's "Keys" line documents, read from the screens' own BINDINGS."""

from __future__ import annotations

from collections import defaultdict

from textual.binding import Binding

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.browse import BrowseScreen
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.compare import CompareScreen
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.screens.evaluate import EvaluateScreen, SourceScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.shape_picker import ShapePicker
from cuco_tui.app.widgets.text_prompt import TextPrompt

SCREENS = (CucoApp, DashboardScreen, CandidateScreen, LineageScreen, CompareScreen, EvaluateScreen, SourceScreen,
           BrowseScreen, TextPrompt, Confirm, ShapePicker)

# What each action means to the engineer: two actions that mean the same may share a key (run a
# candidate through the cascade: evaluate it, or re-benchmark it; open: a candidate or a source).
MEANING = {
    "quit": "quit", "app.quit": "quit",
    "browse": "browse", "app.browse": "browse",
    "lineage": "lineage", "app.lineage": "lineage",
    "search": "search",
    "open_candidate": "open", "view_source": "open",
    "evaluate_selected": "run", "rebenchmark": "run", "evaluate_all": "run all",
    "accept": "yes", "answer(True)": "yes",
    "reject": "no", "answer(False)": "no",
    "back": "back", "close": "back", "cancel": "back",
    "stop": "stop", "edit": "edit", "accept_all": "accept all", "toggle_pause": "pause",
    "cycle_review_mode": "review mode", "hint": "hint", "budget": "budget",
    "make_parent": "use as parent", "export": "export", "next_tab": "next tab", "previous_tab": "previous tab",
    "compare": "compare", "jump": "go to id", "cycle_island": "island filter", "cycle_status": "status filter",
    "cycle_backend": "backend filter", "clear_filters": "no filter", "profile": "profile",
}


def bindings(cls) -> list[tuple[str, str]]:
    out = []
    for b in cls.BINDINGS:
        assert isinstance(b, Binding), (cls, b)
        for key in b.key.split(","):
            out.append((key.strip(), b.action))
    return out


def test_one_key_one_meaning_on_every_screen():
    meanings: dict[str, set[str]] = defaultdict(set)
    where: dict[str, list[str]] = defaultdict(list)
    for cls in SCREENS:
        for key, action in bindings(cls):
            assert action in MEANING, f"{cls.__name__}: {key} -> {action} has no meaning in the key map"
            meanings[key].add(MEANING[action])
            where[key].append(f"{cls.__name__}.{action}")
    clashes = {k: sorted(where[k]) for k, m in meanings.items() if len(m) > 1 and k != "enter"}
    assert not clashes, clashes


def test_the_keys_the_issue_named_no_longer_collide():
    by_key = {key: action for cls in (DashboardScreen, CandidateScreen, LineageScreen, EvaluateScreen)
              for key, action in bindings(cls)}
    assert MEANING[by_key["p"]] == "pause" and MEANING[by_key["u"]] == "use as parent"
    assert MEANING[by_key["b"]] == "browse" and MEANING[by_key["d"]] == "backend filter"
    assert MEANING[by_key["e"]] == "edit" and MEANING[by_key["r"]] == "run"
    assert MEANING[by_key["x"]] == "stop" and MEANING[by_key["w"]] == "export"
    assert "escape" not in dict(bindings(DashboardScreen))  # esc never drops out of the search


def test_every_key_is_in_the_palette():
    system = {"quit", "browse", "lineage", "search"}  # CucoApp.get_system_commands
    for cls in (DashboardScreen, CandidateScreen, LineageScreen, CompareScreen, EvaluateScreen):
        listed = {action for provider in cls.COMMANDS for _, action in provider.COMMANDS}
        for key, action in bindings(cls):
            name = action.removeprefix("app.")
            assert name in listed or (action.startswith("app.") and name in system), (cls.__name__, key, action)
    for key, action in bindings(CucoApp):
        assert action in system, (key, action)


def test_the_footer_of_the_dashboard_starts_with_quit_open_stop_browse():
    shown = [b.description for b in DashboardScreen.BINDINGS if b.show]
    assert shown[:4] == ["Quit", "Open", "Stop", "Browse"]


def test_the_key_bar_puts_every_key_on_as_many_lines_as_it_needs():
    """Issue 36, item 17: Textual's one-line footer cut the keys that did not fit (half the
    dashboard's at 80 columns, the lineage's last ones at 120)."""
    from cuco_tui.app.widgets.key_bar import GAP, KeyEntry, pack

    keys = [KeyEntry(k, k, f"Action {k}", True) for k in "qoxbynea"]  # 8 entries of 10 cells
    for width in (10, 24, 35, 80, 200):
        lines = pack(keys, width)
        assert [e for line in lines for e in line] == keys  # all of them, in order
        assert all(sum(e.width for e in line) + GAP * (len(line) - 1) <= width for line in lines)
    assert len(pack(keys, 80)) == 2 and len(pack(keys, 200)) == 1
    assert pack([KeyEntry("x", "x", "a description wider than the bar", True)], 10) == [[keys[0].__class__(
        "x", "x", "a description wider than the bar", True)]]  # one too wide still shows, alone
