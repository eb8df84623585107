"""`python -m batchscope import|runs|report`: the history DB from a shell, e.g. after a headless GPU run.

Exit codes: 0 ok, 1 the DB could not be used (held by another BatchScope past BATCHSCOPE_DB_WAIT_S, read-only
for an import, or written by a newer BatchScope), 2 bad input (one line on stderr says what).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import duckdb

from batchscope import config
from batchscope.ingest import default_owner, ingest_run
from batchscope.jobs import settle_if_runner_gone
from batchscope.migrations import SchemaTooNewError
from batchscope.runfolder import RunFolder
from batchscope.store import Store
from batchscope.store_file import StoreUnavailableError

EXIT_OK, EXIT_DB, EXIT_USAGE = 0, 1, 2
TABLE_COLUMNS = ["run_id", "name", "state", "model", "dtype", "engine", "points", "points_ok",
                 "best_output_tokens_per_s", "fingerprint"]


class UsageError(Exception):
    """A bad command line, reported in one line instead of argparse's usage dump."""


class _Parser(argparse.ArgumentParser):
    """One-line errors, and no abbreviated options (every subcommand's parser is one of these)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> None:  # argparse's hook; raising keeps the message to one line
        command = " ".join(["python -m batchscope", *self.prog.split()[1:], "--help"])
        raise UsageError(f"{message} (see: {command})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="batchscope", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    importing = commands.add_parser("import", help="ingest run folders made elsewhere into the DB")
    importing.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    importing.add_argument("--db", type=Path, help="DuckDB file (default: $BATCHSCOPE_DB or data/batchscope.duckdb)")
    importing.add_argument("--demo", action="store_true", help="mark the runs as demo data")
    listing = commands.add_parser("runs", help="list stored runs with fingerprint, state and point count")
    listing.add_argument("--db", type=Path, help="DuckDB file (default: $BATCHSCOPE_DB or data/batchscope.duckdb)")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    commands.add_parser("report", help="write a report (see: python -m batchscope report --help)",
                        add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "report":
            from batchscope import report  # the analysis side; loaded only when asked for

            return report.main(argv[1:])
        args = build_parser().parse_args(argv)
        return _import(args) if args.command == "import" else _list(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SchemaTooNewError as error:
        print(f"error: {error}; open it with that version or pass another --db", file=sys.stderr)
        return EXIT_DB
    except StoreUnavailableError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_DB
    except duckdb.Error as error:
        first_line = str(error).strip().splitlines()[0]
        print(f"error: cannot use the database ({first_line}); is the app running on it?", file=sys.stderr)
        return EXIT_DB


def _import(args: argparse.Namespace) -> int:
    for folder in args.run_dirs:
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such directory")
        if not RunFolder(folder).looks_like_run():
            raise UsageError(f"{folder}: not a run folder (it has no spec.json or status.json)")
    with Store(args.db or config.db_path()) as store:
        for folder in args.run_dirs:
            report = ingest_run(store, folder, demo=args.demo)
            if store.run(report.run_id) is not None:  # the audit trail names who imported it (issue 33)
                store.record(default_owner(), "import", report.run_id, str(folder))
            for warning in report.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            settle_if_runner_gone(store, report.run_id)
            run = store.run(report.run_id)
            state = run["state"] if run else "not stored"
            print(f"{report.run_id}: {report.points_added} new point(s), state {state}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    db = args.db or config.db_path()
    if not db.is_file():
        raise UsageError(f"no database at {db}")
    with Store(db) as store:
        runs = store.runs()
    if args.format == "json":
        records = json.loads(runs.to_json(orient="records", date_format="iso"))
        print(json.dumps(records, indent=2, ensure_ascii=False))
    elif runs.empty:
        print("no runs")
    else:
        print(runs[TABLE_COLUMNS].to_string(index=False, na_rep="-", float_format=lambda x: f"{x:,.1f}"))
    return EXIT_OK
