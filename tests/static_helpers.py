"""What the workload tests share: a candidate source passes the static checks (L0), declares
the design it has, and passes the sync checks."""

from __future__ import annotations


def assert_static_ok(src: str, seed: str) -> None:
    from cuco_tui.design.classify import check_declaration
    from cuco_tui.evaluate.static_checks import check_static
    from cuco_tui.evaluate.sync_checks import check_sync

    assert check_static(src, seed, "c.cu") == []
    assert check_declaration(src) == []
    assert check_sync(src, "c.cu") == []
