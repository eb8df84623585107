"""The run actions a page may take for a user, each checked here on the server and written to the audit trail.

Pages hide the buttons a user may not press, but a hidden button is no protection (a session can be
scripted), so every action goes through one of these functions, which refuse with NotAllowed.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from batchscope.jobs import JobManager
from batchscope.store import Store
from batchscope.team.roles import DEFAULT_KEY_ENV_PREFIX, User, at_least
from batchscope.ui.history_view import ImportResult, import_folder

_launching = threading.Lock()  # the queue count and the submit are one step, so a double click cannot pass the limit


class NotAllowed(PermissionError):
    """The user may not do this; the message says why, in words a page can show."""


def may_manage(user: User, owner: str | None) -> bool:
    """Cancel, rename and delete: an admin any run, a tuner their own runs, a viewer none."""
    return user.role == "admin" or (user.role == "tuner" and owner is not None and owner == user.identity)


def may_launch(user: User) -> bool:
    """Launching sweeps and importing runs changes what the team's GPU does and what History holds."""
    return at_least(user.role, "tuner")


def owner_of(store: Store, run_id: str) -> str | None:
    """The run's owner; KeyError for a run the history does not hold."""
    run = store.run(run_id)
    if run is None:
        raise KeyError(run_id)
    return run.get("owner")


def _check_manage(store: Store, user: User, run_id: str, verb: str) -> None:
    owner = owner_of(store, run_id)
    if not may_manage(user, owner):
        raise NotAllowed(f"{user.identity} ({user.role}) may not {verb} {run_id}: it belongs to {owner}; "
                         f"only its owner or an admin may")


def waiting_of(jobs: JobManager, identity: str) -> list[str]:
    """The user's sweeps waiting to launch (not yet running)."""
    return [run_id for run_id in jobs.queue() if (jobs.store.run(run_id) or {}).get("owner") == identity]


def queue_problem(waiting: int, limit: int) -> str | None:
    """Why one more sweep may not be queued, or None: the per-user limit keeps one person from
    filling the team's queue."""
    if waiting >= limit:
        return (f"You already have {waiting} sweep(s) waiting in the queue, the most one person may have "
                f"(queue_limit {limit}). Launch this one when one of yours has started, or cancel one.")
    return None


def endpoint_problems(user: User, spec: dict[str, Any], key_env_prefix: str) -> dict[str, str]:
    """Why `user` may not send these endpoint options, by field; empty when they may. A restart command
    runs a program on this host, and the API key variable sends that variable of the app's environment to
    any URL: only an admin may set a command, and anyone else may name only variables that begin with
    `key_env_prefix`."""
    found: dict[str, str] = {}
    if user.role == "admin":
        return found
    if str(spec.get("server_command") or "").strip():
        found["server_command"] = (f"{user.identity} is a {user.role}: only an admin may set a restart command, "
                                   f"since it runs a program on this host; leave it empty to measure the "
                                   f"server as it runs")
    key_env = str(spec.get("api_key_env") or "").strip()
    if key_env and not key_env.startswith(key_env_prefix):
        found["api_key_env"] = (f"the API key variable must begin with {key_env_prefix} (the variables set aside "
                                f"for API keys), not {key_env[:60]!r}: another would send the app's own "
                                f"environment to the server's URL")
    return found


def launch(jobs: JobManager, user: User, spec: dict[str, Any], queue_limit: int,
           key_env_prefix: str = DEFAULT_KEY_ENV_PREFIX) -> str:
    """Queue a sweep owned by `user`; NotAllowed for a viewer, a user at the queue limit, or endpoint options
    the user may not set (endpoint_problems). runners.spec.SpecError for a bad spec, as JobManager.submit
    raises."""
    if not may_launch(user):
        raise NotAllowed(f"{user.identity} is a {user.role}: only tuners and admins may launch sweeps")
    refused = endpoint_problems(user, spec, key_env_prefix)
    if refused:
        raise NotAllowed("; ".join(refused.values()))
    with _launching:
        problem = queue_problem(len(waiting_of(jobs, user.identity)), queue_limit)
        if problem:
            raise NotAllowed(problem)
        run_id = jobs.submit(spec, owner=user.identity)
    jobs.store.record(user.identity, "launch", run_id)
    return run_id


def cancel(jobs: JobManager, user: User, run_id: str) -> None:
    """Cancel a queued or running sweep: its owner or an admin."""
    _check_manage(jobs.store, user, run_id, "cancel")
    jobs.cancel(run_id)
    jobs.store.record(user.identity, "cancel", run_id)


def rename(store: Store, user: User, run_id: str, name: str) -> None:
    """Rename a run: its owner or an admin (ValueError for an empty name, as Store.rename)."""
    _check_manage(store, user, run_id, "rename")
    store.rename(run_id, name)
    store.record(user.identity, "rename", run_id, name.strip())


def delete(jobs: JobManager, user: User, run_id: str, delete_folder: bool = False) -> None:
    """Delete a finished run (and with delete_folder, the folder the app made): its owner or an admin.
    ValueError for a run still queued or running, or a folder BatchScope does not delete."""
    _check_manage(jobs.store, user, run_id, "delete")
    if run_id in jobs.active() + jobs.queue():
        raise ValueError("this run is still queued or running: cancel it on its Run page first")
    jobs.store.delete(run_id, delete_folder=delete_folder)
    jobs.store.record(user.identity, "delete", run_id, "with its folder" if delete_folder else None)


def import_run(store: Store, user: User, path_text: str) -> ImportResult:
    """Import a run folder, owned by the importing user (if it was not stored before)."""
    if not may_launch(user):
        raise NotAllowed(f"{user.identity} is a {user.role}: only tuners and admins may import runs")
    result = import_folder(store, path_text, owner=user.identity)
    if result.run_id and not result.error:
        store.record(user.identity, "import", result.run_id, path_text.strip())
    return result


def sign_in(store: Store, user: User, token_issued_at: Any) -> bool:
    """Record a sign-in once per ID token (each new tab of a signed-in browser is not a new sign-in)."""
    return store.record_once(user.identity, "sign-in", f"token issued at {token_issued_at}")


@dataclass(frozen=True)
class QueueEntry:
    """One line of the queue panel: a run, whose it is, and running or its place in the wait."""

    run_id: str
    name: str
    owner: str
    place: str


def queue_board(jobs: JobManager) -> list[QueueEntry]:
    """Whose sweeps run now, then what waits, in launch order."""
    entries = []
    for place, run_ids in (("running", jobs.active()), ("waiting", jobs.queue())):
        for position, run_id in enumerate(run_ids, start=1):
            run = jobs.store.run(run_id) or {}
            entries.append(QueueEntry(run_id, run.get("name") or run_id, run.get("owner") or "?",
                                      place if place == "running" else f"waiting #{position}"))
    return entries
