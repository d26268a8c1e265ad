"""`cuco <subcommand>`: the parser of every subcommand, and `main`, which runs one.

Every failure a user can cause (a bad path, an unknown workload, a GPU that is not there)
ends with one sentence on stderr and exit code 2; a candidate that fails evaluation is a
result, printed like any other, with exit code 1."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from cuco_tui.cli.common import IntermixedParser, package_version
from cuco_tui.cli.doctor import add_doctor_parser
from cuco_tui.cli.evaluate import add_eval_parsers, add_selftest_parsers
from cuco_tui.cli.export import add_export_parser
from cuco_tui.cli.search import add_search_parser
from cuco_tui.cli.sessions import add_session_parsers
from cuco_tui.cli.workload import add_workload_parsers
from cuco_tui.core.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cuco", description="co-design of computation and communication in multi-GPU CUDA kernels")
    p.add_argument("--version", action="version", version=f"cuco {package_version()}")
    # every subcommand (and `workload`'s) takes its options and positionals in any order
    sub = p.add_subparsers(dest="command", required=True, parser_class=IntermixedParser)
    # the order of `cuco --help`
    add_eval_parsers(sub)  # eval, baseline
    add_doctor_parser(sub)
    add_selftest_parsers(sub)  # selftest, workloads
    add_workload_parsers(sub)  # workload new, workload check
    add_search_parser(sub)
    add_session_parsers(sub)  # sessions, show
    add_export_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = args.fn(args)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not at exit
        return rc
    except UsageError as exc:
        with contextlib.suppress(OSError):  # what was said before the refusal shows before it, in a shared log
            sys.stdout.flush()
        print(f"cuco: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cuco show ... | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("cuco: interrupted", file=sys.stderr)
        return 130
