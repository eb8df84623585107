"""Opening the history DB's file, whoever else is at it (issue 38).

A new file is made whole beside its place and linked in (create-then-link), so a process racing to open
it never finds a half-made file, and the one that loses the race opens the winner's. DuckDB lets one
process at a time hold the file: another's lock is waited out for a while, then named without that
process's details (they would reach a browser). A file this process cannot write (read-only media, an
immutable or read-only file, a folder without write permission) opens read-only, for browsing.
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import duckdb

from batchscope.migrations import CURRENT_VERSION, SchemaTooNewError, migrate, schema_version

POLL_S = 0.1
_LOCKED = "Could not set lock on file"  # DuckDB's words for another process's hold on the file


class StoreUnavailableError(RuntimeError):
    """The history DB cannot be used as asked: another process holds it, it cannot be made, or it is
    read-only and a write was asked for (or an upgrade it cannot take)."""


def read_only_reason(path: Path) -> str | None:
    """Why the DB at `path` opens read-only, or None when this process can write it and make its
    write-ahead log beside it."""
    if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        return None
    return (f"{path} cannot be written from here (a read-only file, folder or medium), so the history is open "
            f"for browsing only: actions that would change it are off")


def locked_words(path: Path) -> str:
    """The message for a file another process holds: what holds it and how to find it, never its pid."""
    return (f"another BatchScope (the app, or an import or report) has {path} open, and only one process can "
            f"use it at a time: close that one, or find it with `lsof {path}` or `fuser -v {path}`")


def connect(path: Path, wait_s: float) -> tuple[duckdb.DuckDBPyConnection, str | None]:
    """A connection to the DB at `path` (made, migrated, if there is none yet) and why it is read-only
    (None when it is not). Raises StoreUnavailableError when another process still holds it after `wait_s`
    seconds, or when it cannot be made; SchemaTooNewError for a DB of a newer BatchScope."""
    if not path.exists():
        _create(path)
    reason = read_only_reason(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con = duckdb.connect(str(path), read_only=reason is not None)
            break
        except duckdb.IOException as error:
            if _LOCKED not in str(error):
                raise
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(locked_words(path)) from None
            time.sleep(POLL_S)
    try:
        if reason is None:
            migrate(con)
        else:
            _check_current(con, path)
    except BaseException:
        con.close()  # so this process does not keep the file locked
        raise
    return con, reason


def _create(path: Path) -> None:
    """A new, migrated DB at `path`: made under a name of its own beside it, then linked into place, which
    fails if another process linked its own first (that one is kept, and this one dropped)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(temp))
        try:
            migrate(con)
        finally:
            con.close()
        os.link(temp, path)
    except FileExistsError:
        pass  # lost the race: the winner's file is whole, and it is the one opened
    except (OSError, duckdb.IOException) as error:
        raise StoreUnavailableError(f"cannot make the history at {path}: {error}") from None
    finally:
        temp.unlink(missing_ok=True)
        temp.with_name(temp.name + ".wal").unlink(missing_ok=True)


def _check_current(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """A read-only DB cannot be migrated: it must be at this BatchScope's schema already."""
    version = schema_version(con)
    if version > CURRENT_VERSION:
        raise SchemaTooNewError(f"schema version {version}; this one knows up to {CURRENT_VERSION}")
    if version < CURRENT_VERSION:
        raise StoreUnavailableError(f"{path} is read-only and at schema version {version}, older than this "
                                    f"BatchScope's {CURRENT_VERSION}: copy it somewhere writable to upgrade it")
