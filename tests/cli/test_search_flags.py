"""The search flags that become the session's SearchConfig, read as `cuco search` reads them."""

import pytest

from cuco_tui.cli.common import config_overrides
from cuco_tui.cli.cuco import build_parser
from cuco_tui.cli.search import CONFIG_FLAGS
from cuco_tui.search.config import SearchConfig


def overrides_of(*argv: str) -> dict:
    args = build_parser().parse_args(["search", *argv])
    return config_overrides(args, "offline", CONFIG_FLAGS)


def test_no_lookahead_makes_each_generation_wait_for_the_one_before():
    config = SearchConfig(workload="gemm_allgather", **overrides_of("--no-lookahead", "--seed", "3"))
    assert config.lookahead is False and config.seed == 3


def test_the_lookahead_is_on_unless_turned_off():
    assert "lookahead" not in overrides_of("--seed", "3")
    assert SearchConfig(workload="gemm_allgather", **overrides_of()).lookahead is True


def test_keep_workers_is_on_unless_turned_off_also_on_resume():
    assert "keep_workers" not in overrides_of()
    assert overrides_of("--keep-workers")["keep_workers"] is True
    assert overrides_of("--no-keep-workers")["keep_workers"] is False
    assert SearchConfig(workload="gemm_allgather").keep_workers is True


def test_keep_workers_with_slurm_is_refused_before_anything_starts(tmp_path):
    from cuco_tui.cli.search import cmd_search
    from cuco_tui.core.errors import UsageError

    args = build_parser().parse_args(["search", "--executor", "slurm", "--keep-workers", "--agent", "offline",
                                      "--session", str(tmp_path / "s")])
    with pytest.raises(UsageError, match="--keep-workers"):
        cmd_search(args)
    assert not (tmp_path / "s").exists()


def test_cuco_tui_takes_the_same_pacing_flags():
    from cuco_tui.cli.tui import build_tui_parser

    args = build_tui_parser().parse_args(["--keep-workers", "--no-lookahead"])
    overrides = config_overrides(args, "offline", ("generations", "lookahead", "keep_workers"))
    assert overrides == {"lookahead": False, "keep_workers": True}


def test_cuco_tui_refuses_keep_workers_with_slurm(capsys):
    from cuco_tui.cli.tui import tui_main

    assert tui_main(["--executor", "slurm", "--keep-workers", "--agent", "offline"]) == 2
    assert "drop --keep-workers" in capsys.readouterr().err


def test_evaluations_sets_the_sessions_total_and_is_kept_unless_given():
    assert "evaluations" not in overrides_of()
    config = SearchConfig(workload="gemm_allgather", **overrides_of("--evaluations", "40"))
    assert config.evaluations == 40

