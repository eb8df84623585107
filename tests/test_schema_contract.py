"""The run folder's Parquet schemas (runners/results/schemas.py) and the history DB's migrations
(batchscope/migrations.py) name the same columns with the same types.

Ingest stores a point's summary file in the `points` table and each detail file in the table of its kind
(`batchscope.store.Store.add_point`, which keeps only the columns the DB has). So a schema column no
migration creates is dropped without a word at import, and a migration column no file carries stays null
forever. These tests fail on either: every schema column has its DB column, created by a migration, of the
matching type; every DB column of those tables comes from a schema column or is listed in DB_ONLY with its
reason; and one point written with every column set comes back from the DB with every value. The same
holds for the files a run has once (RUN_FILE_TABLES: a quantised run's quant_error.parquet).
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from batchscope.ingest import ingest_run
from batchscope.migrations import migrate
from batchscope.store import POINT_TABLES, Store
from runners.results import contract, schemas
from runners.results.runfolder import write_parquet

# the DB table each point file is stored in (Store.add_point: summary → points, detail kind → its table)
FILE_TABLES: dict[str, tuple[str, pa.Schema]] = {
    "summary": ("points", schemas.SUMMARY),
    **{kind: (kind, schema) for kind, schema in schemas.DETAIL.items()},
}

# files a run has once, not per point (batchscope.ingest stores each in its table)
RUN_FILE_TABLES: dict[str, tuple[str, pa.Schema]] = {contract.QUANT_ERROR: ("quant_errors", schemas.QUANT_ERROR)}

# columns of those tables that no point file carries, each with why
DB_ONLY: dict[tuple[str, str], str] = {
    (table, "run_id"): "the run a row belongs to: the run folder's name (Store.add_point adds it), not a file column"
    for table, _ in (*FILE_TABLES.values(), *RUN_FILE_TABLES.values())
}

# Arrow type → the DuckDB type its migration must declare (the only types runners/results/schemas.py uses)
DB_TYPE = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR",
           pa.bool_(): "BOOLEAN"}


def migrated_columns() -> dict[str, dict[str, str]]:
    """Column → DuckDB type of every table, in a fresh DB built by the migrations alone."""
    con = duckdb.connect()
    try:
        migrate(con)
        tables = [row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        return {table: {name: kind for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall()}
                for table in tables}
    finally:
        con.close()


def mismatches(files: dict[str, tuple[str, pa.Schema]], db: dict[str, dict[str, str]],
               db_only: dict[tuple[str, str], str]) -> list[str]:
    """Every way the point files' schemas and the DB's tables disagree, one line each."""
    found = []
    for kind, (table, schema) in files.items():
        columns = db.get(table)
        if columns is None:
            found.append(f"{kind} files go to table {table}, which no migration creates")
            continue
        for column in schema:
            if column.type not in DB_TYPE:
                found.append(f"{kind}.{column.name}: Arrow type {column.type} has no DuckDB type in DB_TYPE")
            elif column.name not in columns:
                found.append(f"{kind}.{column.name} ({column.type}) has no column in table {table}: "
                             f"add a migration")
            elif columns[column.name] != DB_TYPE[column.type]:
                found.append(f"{kind}.{column.name} is {column.type} but {table}.{column.name} is "
                             f"{columns[column.name]} (expected {DB_TYPE[column.type]})")
        for name in columns:
            if name not in schema.names and (table, name) not in db_only:
                found.append(f"{table}.{name} comes from no column of the {kind} schema and is not listed "
                             f"as DB-only")
    for table, name in db_only:
        if name not in db.get(table, {}):
            found.append(f"DB_ONLY lists {table}.{name}, which no migration creates")
    return found


def test_every_point_file_has_its_table_and_every_table_its_file() -> None:
    assert set(schemas.DETAIL) == set(POINT_TABLES)
    assert {table for table, _ in FILE_TABLES.values()} == {"points", *POINT_TABLES}


def test_every_schema_column_has_its_migrated_db_column_and_the_reverse() -> None:
    assert mismatches({**FILE_TABLES, **RUN_FILE_TABLES}, migrated_columns(), DB_ONLY) == []


def test_the_comparison_names_a_column_added_to_one_side_only() -> None:
    """The check itself fails on a one-sided column, whichever side has it, and on a type that disagrees."""
    db = migrated_columns()
    schema = schemas.DETAIL["steps"]
    files = {"steps": ("steps", schema.append(pa.field("new_file_column", pa.float64())))}
    only = {("steps", "run_id"): "the run"}
    assert mismatches(files, db, only) == [
        "steps.new_file_column (double) has no column in table steps: add a migration"]
    wider = {**db, "steps": {**db["steps"], "new_db_column": "DOUBLE"}}
    assert mismatches({"steps": ("steps", schema)}, wider, only) == [
        "steps.new_db_column comes from no column of the steps schema and is not listed as DB-only"]
    retyped = {**db, "steps": {**db["steps"], "batch_rows": "BIGINT"}}
    assert mismatches({"steps": ("steps", schema)}, retyped, only) == [
        "steps.batch_rows is int32 but steps.batch_rows is BIGINT (expected INTEGER)"]


def _value(column: pa.Field, position: int) -> object:
    """A value of the column's type that no other column of its file holds."""
    if column.type == pa.string():
        return f"{column.name}-{position}"
    if column.type == pa.float64():
        return position + 0.25
    if column.type == pa.bool_():
        return True  # the file's only flag, and not the default a missing value would read as
    return position + 1000


def test_a_point_with_every_column_set_comes_back_from_the_db_with_every_value(tmp_path: Path) -> None:
    """Ingest (batchscope.ingest.ingest_run) carries every schema column of every point file into the DB."""
    folder = tmp_path / "runs" / "every-column"
    (folder / contract.POINTS).mkdir(parents=True)
    contract.write_json(folder / contract.SPEC, {"model": "tiny", "run_id": folder.name,
                                                 "created_at": contract.timestamp()})
    contract.write_json(folder / contract.STATUS, contract.new_status(folder.name, "done", 1))
    written = {}
    for kind, (_, schema) in FILE_TABLES.items():
        row = {column.name: _value(column, i) for i, column in enumerate(schema)}
        row["point_index"] = 0
        written[kind] = row
    for kind in POINT_TABLES:  # the summary last, as the runner writes it: it makes the point complete
        write_parquet(folder / contract.POINTS / contract.point_file(0, kind), [written[kind]], schemas.DETAIL[kind])
    write_parquet(folder / contract.POINTS / contract.point_file(0, "summary"), [written["summary"]],
                  schemas.SUMMARY)
    for name, (_, schema) in RUN_FILE_TABLES.items():
        written[name] = {column.name: _value(column, i) for i, column in enumerate(schema)}
        write_parquet(folder / name, [written[name]], schema)

    with Store(tmp_path / "history.duckdb") as store:
        report = ingest_run(store, folder)
    assert (report.points_added, report.warnings) == (1, [])
    con = duckdb.connect(str(tmp_path / "history.duckdb"), read_only=True)
    try:
        for kind, (table, schema) in {**FILE_TABLES, **RUN_FILE_TABLES}.items():
            names = ", ".join(f'"{name}"' for name in schema.names)
            rows = con.execute(f"SELECT {names} FROM {table} WHERE run_id = ?", [folder.name]).fetchall()
            assert len(rows) == 1, f"{table}: {len(rows)} rows"
            stored = dict(zip(schema.names, rows[0]))
            lost = {name: (written[kind][name], stored[name]) for name in schema.names
                    if stored[name] != written[kind][name]}
            assert lost == {}, f"{kind} → {table}: written vs stored"
    finally:
        con.close()
