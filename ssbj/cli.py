"""The ``ssbj`` command line.

Every command, with the module that implements it:

* ``ssbj join``: enrich a stream file with a master file, write Parquet (:mod:`ssbj.filejoin`);
* ``ssbj plan``: Theorem 1's memory-optimal bound, predicted cache share and rates, and the
  budget for a target rate, before any run (:mod:`ssbj.filejoin`);
* ``ssbj demo``: SSBJ vs MESHJOIN on generated skewed data (:mod:`ssbj.demo`);
* ``ssbj bench``: the paper's experiments (:mod:`ssbj.bench.cli`);
* ``ssbj run``, ``ssbj validate``: run or check a streaming job file (:mod:`ssbj.pipeline.commands`);
* ``ssbj quickstart``: write a demo job (:mod:`ssbj.pipeline.quickstart`);
* ``ssbj sql``: print the warehouse DDL (:mod:`ssbj.warehouse`);
* ``ssbj check``, ``ssbj gate``, ``ssbj publish``, ``ssbj quarantine``: the quality gate on a
  run's rows (:mod:`ssbj.pipeline.quality`, :mod:`ssbj.pipeline.audit`);
* ``ssbj explain``, ``ssbj query``: a SQL query's plans, and a SELECT run through the multi-way
  operator (:mod:`ssbj.sql.cli`).
* ``ssbj maintain``: a continuous query kept exact under inserts and deletes (:mod:`ssbj.cq.cli`).

``ssbj join`` replays a stream file (Parquet or CSV) through the operator as if it were
arriving, batch by batch, with a master file as R, and streams the enriched rows to a
Parquet file.  Sizes given to ``--memory`` use SI units as decimal powers of 1000
(``kB``, ``MB``, ``GB``, ``TB``; ``k``, ``M``, ``G``, ``T`` alone mean the same) and IEC units
as binary powers of 1024 (``KiB``, ``MiB``, ``GiB``, ``TiB``); units are case-insensitive
and a bare number is bytes, so ``64MB`` is 64,000,000 bytes and ``64MiB`` 67,108,864.

Every error the user can fix (a missing file, a missing or mistyped key column, a bad
option value) is reported as one line ``ssbj: error: ...`` on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import NoReturn

from ssbj.cq.cli import add_maintain_command
from ssbj.demo import add_demo_command
from ssbj.errors import DependencyError, SSBJError
from ssbj.filejoin import add_file_commands
from ssbj.files import one_line
from ssbj.pipeline.commands import add_commands
from ssbj.sql.cli import add_sql_commands
from ssbj.units import parse_size

__all__ = ["build_parser", "main", "parse_size"]

PROG = "ssbj"


class _UsageError(Exception):
    """A command-line syntax error found by argparse."""


class _Parser(argparse.ArgumentParser):
    """Argparse with one-line errors that ``main`` reports instead of exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage and exiting."""
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------- ssbj bench
def _cmd_bench(args: argparse.Namespace, extra: list[str]) -> int:
    """``ssbj bench``: delegate to :mod:`ssbj.bench.cli` (imported only here)."""
    try:
        bench_cli = importlib.import_module("ssbj.bench.cli")
    except ImportError as exc:
        raise DependencyError(
            f"the bench command needs the benchmark extras (pip install 'ssbj[bench]'): {one_line(exc)}"
        ) from exc
    parser = _Parser(prog=f"{PROG} bench", description="Run the SSBJ / MESHJOIN benchmarks.")
    bench_cli.add_arguments(parser)
    bench_args = parser.parse_args(extra)
    rc = bench_cli.run(bench_args)
    return rc if isinstance(rc, int) else 0


# ---------------------------------------------------------------------- parser / main
def build_parser() -> argparse.ArgumentParser:
    """Build the ``ssbj`` argument parser."""
    parser = _Parser(
        prog=PROG,
        description="Semi-stream enrichment with SSBJ (Semi-Stream Balanced Join) and MESHJOIN.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_file_commands(sub)
    add_demo_command(sub)
    bench = sub.add_parser(
        "bench",
        help="benchmarks (needs the bench extras); 'ssbj bench --help' for options",
        add_help=False,
    )
    bench.set_defaults(handler=_cmd_bench, accepts_extra=True)

    add_commands(sub)
    add_sql_commands(sub)
    add_maintain_command(sub)
    return parser


def _error(message: str) -> int:
    """Print ``ssbj: error: message`` to stderr (one line per line of the message); the exit code 2."""
    lines = [" ".join(line.split()) if line.strip() else "" for line in message.splitlines()] or [""]
    first = lines[0]
    rest = "".join(f"\n  {line.strip()}" for line in lines[1:] if line)
    print(f"{PROG}: error: {first}{rest}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ssbj`` command; returns the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_extra", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        handler: Callable[[argparse.Namespace, list[str]], int] = args.handler
        return handler(args, extra)
    except _UsageError as exc:
        return _error(str(exc))
    except SSBJError as exc:
        return _error(str(exc))
    except SystemExit as exc:  # --help, or a delegated command exiting
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return _error(str(exc.code))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
