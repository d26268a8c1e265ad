"""What the command line prints where programs read it (a pipe, a file) and what its --help says:
no trailing spaces, the width COLUMNS asks for, and a help text for every option."""

from __future__ import annotations

import argparse

import pytest

from cuco_tui.cli import build_parser, main
from cuco_tui.cli.tui import build_open_parser, build_tui_parser
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "gemm_allgather-failures-shared-gpu.bundle"
SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"


def _rich_part(out: str) -> list[str]:
    """The lines rich laid out (a `cuco show` diff that follows is printed raw, as it is)."""
    return out.split("\ndiff against", 1)[0].splitlines()


@pytest.mark.parametrize("columns", [None, "60"])
def test_piped_output_has_no_trailing_spaces_and_takes_columns(capsys, monkeypatch, tmp_path, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 200)
    broken = tmp_path / "frozen.cu"  # L0 rejects it at once: a result with a diagnostics panel
    broken.write_text(SEED.read_text().replace("#include", "#include  ", 1))
    assert main(["doctor"]) == 0
    assert main(["eval", str(broken)]) == 1
    assert main(["show", str(EXAMPLE), "c0003"]) == 0  # last: its diff is printed raw
    lines = _rich_part(capsys.readouterr().out)
    assert any(line.startswith("status") and "rejected" in line for line in lines)
    assert any("nvcc" in line for line in lines)
    padded = [line for line in lines if line != line.rstrip()]
    assert padded == [], padded[:3]
    assert max(len(line) for line in lines) <= width
    if columns:  # the doctor's table folds into 60 columns instead of running to 200
        assert max(len(line) for line in lines) > 40


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every parser of `cuco` (each subcommand, nested ones too) and of `cuco-tui`."""
    found = []
    todo = [("cuco", build_parser()), ("cuco-tui", build_tui_parser()), ("cuco-tui open", build_open_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return found


def test_every_option_of_every_subcommand_has_a_help_text():
    parsers = _parsers()
    assert {"cuco eval", "cuco baseline", "cuco selftest", "cuco search", "cuco export",
            "cuco workload new"} <= {name for name, _ in parsers}
    missing = [f"{name} {action.option_strings[0] if action.option_strings else action.dest}"
               for name, parser in parsers for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction)
               and (action.help is None or not action.help.strip())]
    assert missing == [], "options without a help text: " + ", ".join(missing)
    for name, parser in parsers:  # each subcommand is described in its parent's --help too
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                described = {a.dest for a in action._choices_actions if a.help}
                assert described == set(action.choices), f"{name}: {set(action.choices) - described}"
