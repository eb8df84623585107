"""Read a history DB back as plain rows, so a test can say "this changed nothing"."""
from __future__ import annotations

from pathlib import Path

import duckdb

TABLES = ("runs", "points", "repeats", "requests", "steps", "samples", "calibrations")


def dump_tables(db: Path) -> dict[str, list[tuple]]:
    """Every row of every table, in a stable order, read through a separate read-only connection."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {table: sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr) for table in TABLES}
    finally:
        con.close()
