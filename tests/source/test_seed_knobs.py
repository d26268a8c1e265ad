"""Knobs a seed declares (`// cuco-knob:`), and the offline agent on a workload without templates."""

from __future__ import annotations

import shutil

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook, StrategyError
from cuco_tui.source.knobs import KnobError, seed_knobs, with_knobs
from cuco_tui.workload.scaffold import new_workload

BLOCK = """// frozen
// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host
constexpr int kChunks = 2;   // cuco-knob: 1 2 4
#define COMM_BLOCKS 16       // cuco-knob: 8, 16, 32
constexpr bool kOwnFirst = true;  // cuco-knob: true false
constexpr float kScale = 0.5f;  // cuco-knob: 0.25f 0.5f
int other = 3;
// EVOLVE-BLOCK-END
// frozen too
"""


def test_knobs_are_read_with_the_code_value_first():
    knobs = seed_knobs(BLOCK)
    assert [(k.name, k.default, k.values) for k in knobs] == [
        ("kChunks", "2", ("2", "1", "4")), ("COMM_BLOCKS", "16", ("16", "8", "32")),
        ("kOwnFirst", "true", ("true", "false")), ("kScale", "0.5f", ("0.5f", "0.25f"))]
    assert knobs[0].choices() == (2, 1, 4) and knobs[3].choices() == (0.5, 0.25)


def test_setting_knobs_changes_only_their_values():
    out = with_knobs(BLOCK, {"kChunks": 4, "COMM_BLOCKS": 32, "kOwnFirst": "false", "kScale": 0.25})
    assert "constexpr int kChunks = 4;   // cuco-knob: 1 2 4" in out
    assert "#define COMM_BLOCKS 32       // cuco-knob: 8, 16, 32" in out
    assert "constexpr bool kOwnFirst = false;" in out and "kScale = 0.25f;" in out
    assert out.replace("= 4;", "= 2;").replace(" 32 ", " 16 ").replace("false;", "true;").replace(
        "0.25f;", "0.5f;") == BLOCK


@pytest.mark.parametrize("line, match", [
    ("constexpr int kChunks = 3;  // cuco-knob: 1 2 4", "is 3 in the code, which its list"),
    ("constexpr int kChunks = 1;  // cuco-knob: 1", "lists 1 value"),
    ("constexpr int kChunks = 1;  // cuco-knob: 1 1 2", "lists a value twice"),
    ("kChunks(1);  // cuco-knob: 1 2", "must end a constant's line"),
    ("constexpr int kChunks = 1;  // cuco-knob: 1 two-and-a-half", "neither a number nor a name"),
])
def test_a_malformed_knob_is_named_with_its_line(line, match):
    source = BLOCK.replace("int other = 3;", line)
    with pytest.raises(KnobError, match=match):
        seed_knobs(source)


def test_a_knob_outside_the_blocks_or_named_twice_is_refused():
    with pytest.raises(KnobError, match="outside the EVOLVE blocks"):
        seed_knobs(BLOCK.replace("// frozen too", "constexpr int kOut = 1;  // cuco-knob: 1 2"))
    with pytest.raises(KnobError, match="declared twice"):
        seed_knobs(BLOCK.replace("int other = 3;", "constexpr int kChunks = 1;  // cuco-knob: 1 2"))


def test_a_value_a_knob_does_not_list_is_refused():
    with pytest.raises(KnobError, match="cannot be 3"):
        with_knobs(BLOCK, {"kChunks": 3})
    with pytest.raises(KnobError, match="no knob 'kNone'"):
        with_knobs(BLOCK, {"kNone": 1})


def test_the_scaffold_is_searchable_and_a_workload_without_knobs_or_templates_is_refused(tmp_path):
    made = new_workload("knobby", tmp_path)
    book = StrategyBook.load(made.root, made.root / "seed.cu")
    assert [s.name for s in book.strategies] == ["seed"] and book.seed_strategy == "seed"
    seed = made.root / "seed.cu"
    seed.write_text(seed.read_text().replace("  // cuco-knob: 1 2 4", ""))
    with pytest.raises(StrategyError) as err:
        StrategyBook.load(made.root, seed)
    message = str(err.value)
    assert "\n" not in message and "cuco-knob" in message and "--agent claude" in message
    shutil.rmtree(made.root)
