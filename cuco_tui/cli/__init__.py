"""The command line: `cuco <subcommand>` (`main`) and `cuco-tui` (`tui_main`), the entry points
pyproject names. One module per group of subcommands; `common` holds what they share."""

from cuco_tui.cli.cuco import build_parser, main
from cuco_tui.cli.tui import tui_main

__all__ = ["build_parser", "main", "tui_main"]
