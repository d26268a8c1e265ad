"""The search flags that become the session's SearchConfig, read as `cuco search` reads them."""

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
