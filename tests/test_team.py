"""Issue 33's rules without a browser: the role file parser, who may manage a run (checked by the
actions the pages call, so a forced call is refused on the server), the per-user queue limit, owners
and the audit trail, with a real Store and a real JobManager running the tiny CPU runner."""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchscope.ingest import default_owner
from batchscope.jobs import JobManager
from batchscope.store import Store
from batchscope.team import actions, roles
from batchscope.team.roles import TeamConfigError, User
from tests.runner_helpers import LONG, QUICK, RUN_TIMEOUT_S, until

ANA, BO = User("ana@team.test", "tuner"), User("bo@team.test", "tuner")
ROOT, VI = User("root@team.test", "admin"), User("vi@team.test", "viewer")


# ---- the role file --------------------------------------------------------------------------------

def test_roles_from_emails_domains_and_the_default() -> None:
    config = roles.parse({"default_role": "viewer", "queue_limit": 5,
                          "roles": {"Ana@Team.test": "admin", "team.test": "tuner", "@ops.test": "Admin"}})
    assert config.role_for("ana@team.test") == "admin"  # the email wins over its domain
    assert config.role_for("bo@team.test") == "tuner"
    assert config.role_for("cy@ops.test") == "admin"
    assert config.role_for("dee@elsewhere.test") == "viewer"
    assert config.queue_limit == 5
    assert roles.parse({}) == roles.TeamConfig(default_role="viewer", queue_limit=roles.DEFAULT_QUEUE_LIMIT)


@pytest.mark.parametrize(("data", "message"), [
    ({"roles": {"ana@team.test": "owner"}}, "roles entry 'ana@team.test': role 'owner' is not one of viewer, tuner, admin"),
    ({"roles": {"not an email": "tuner"}}, "roles entry 'not an email' is neither an email"),
    ({"roles": {"localhost": "tuner"}}, "roles entry 'localhost' is neither an email"),
    ({"default_role": "root"}, "default_role: role 'root' is not one of"),
    ({"queue_limit": 0}, "queue_limit 0 must be a whole number of at least 1"),
    ({"queue_limit": "3"}, "queue_limit '3' must be a whole number"),
    ({"role": {"a@b.test": "admin"}}, "unknown key(s) role"),
    ({"roles": ["ana@team.test"]}, "[roles] must be a table"),
])
def test_a_bad_entry_is_refused_with_a_message_naming_it(data: dict, message: str) -> None:
    with pytest.raises(TeamConfigError) as raised:
        roles.parse(data, "team.toml")
    assert str(raised.value).startswith("team.toml: ") and message in str(raised.value)


def test_the_team_file_is_read_and_an_unreadable_one_named(tmp_path: Path) -> None:
    assert roles.load(tmp_path / "missing.toml") == roles.TeamConfig()
    good = tmp_path / "team.toml"
    good.write_text('default_role = "tuner"\n[roles]\n"example.com" = "admin"\n')
    assert roles.load(good).role_for("x@example.com") == "admin"
    bad = tmp_path / "bad.toml"
    bad.write_text("[roles\n")
    with pytest.raises(TeamConfigError, match="bad.toml: cannot read it as TOML"):
        roles.load(bad)


# ---- who may manage a run -------------------------------------------------------------------------

def test_owner_or_admin_may_manage_a_viewer_never() -> None:
    assert actions.may_manage(ANA, ANA.identity) and actions.may_manage(ROOT, ANA.identity)
    assert not actions.may_manage(BO, ANA.identity)
    assert not actions.may_manage(VI, VI.identity)  # a viewer owns nothing it may change
    assert not actions.may_manage(ANA, None)
    assert actions.may_launch(ANA) and actions.may_launch(ROOT) and not actions.may_launch(VI)


@pytest.fixture
def store_with_anas_run(tmp_path: Path, tiny_run: Path) -> Iterator[tuple[Store, str]]:
    with Store(tmp_path / "history.duckdb") as store:
        result = actions.import_run(store, ANA, str(tiny_run))
        yield store, result.run_id


def test_forced_rename_and_import_are_refused_on_the_server(store_with_anas_run) -> None:
    store, run_id = store_with_anas_run
    assert store.run(run_id)["owner"] == ANA.identity  # an import belongs to whoever imported it
    with pytest.raises(actions.NotAllowed, match="bo@team.test .* may not rename .* it belongs to ana@team.test"):
        actions.rename(store, BO, run_id, "bo was here")
    with pytest.raises(actions.NotAllowed):
        actions.rename(store, VI, run_id, "vi was here")
    with pytest.raises(actions.NotAllowed, match="only tuners and admins may import"):
        actions.import_run(store, VI, "/anywhere")
    assert store.run(run_id)["name"] == run_id
    actions.rename(store, ANA, run_id, "ana's own")
    actions.rename(store, ROOT, run_id, "root's choice")
    assert store.run(run_id)["name"] == "root's choice"
    trail = store.audit()
    assert list(zip(trail["actor"], trail["action"], trail["run_id"])) == [
        (ROOT.identity, "rename", run_id), (ANA.identity, "rename", run_id), (ANA.identity, "import", run_id)]


def test_an_owner_recorded_first_stays_and_a_headless_import_is_the_os_users(tmp_path: Path, tiny_run: Path) -> None:
    folder = tmp_path / "runs" / "cli-run"
    shutil.copytree(tiny_run, folder)
    with Store(tmp_path / "history.duckdb") as store:
        from batchscope.ingest import ingest_run

        ingest_run(store, folder)
        assert store.run("cli-run")["owner"] == default_owner() != ""
        ingest_run(store, folder, owner="someone-else")  # a later ingest never changes it
        assert store.run("cli-run")["owner"] == default_owner()
        assert store.runs(owner=default_owner())["run_id"].tolist() == ["cli-run"]
        assert store.runs(owner="nobody").empty


def test_a_sign_in_is_recorded_once_per_id_token(tmp_path: Path) -> None:
    with Store(tmp_path / "history.duckdb") as store:
        assert actions.sign_in(store, ANA, 1700000000)
        assert not actions.sign_in(store, ANA, 1700000000)  # a second tab of the same sign-in
        assert actions.sign_in(store, ANA, 1700000600)
        assert store.audit()["action"].tolist() == ["sign-in", "sign-in"]


# ---- the job queue: launch, the per-user limit, cancel and delete -------------------------------

@pytest.fixture
def manager(tmp_path: Path) -> Iterator[JobManager]:
    opened = JobManager.instance(tmp_path / "history.duckdb", tmp_path / "runs")
    yield opened
    opened.shutdown()


def test_queue_limit_cancel_and_delete_go_through_the_checks(manager: JobManager) -> None:
    with pytest.raises(actions.NotAllowed, match="only tuners and admins may launch"):
        actions.launch(manager, VI, QUICK, queue_limit=3)
    running = actions.launch(manager, ANA, LONG, queue_limit=2)
    until(lambda: manager.active() == [running], what="ana's first sweep to launch")
    waiting = [actions.launch(manager, ANA, QUICK, queue_limit=2) for _ in range(2)]
    with pytest.raises(actions.NotAllowed, match=r"already have 2 sweep\(s\) waiting .*queue_limit 2"):
        actions.launch(manager, ANA, QUICK, queue_limit=2)
    bos = actions.launch(manager, BO, QUICK, queue_limit=2)  # the limit is per user
    board = actions.queue_board(manager)
    assert [(e.run_id, e.owner, e.place) for e in board] == [
        (running, ANA.identity, "running"), (waiting[0], ANA.identity, "waiting #1"),
        (waiting[1], ANA.identity, "waiting #2"), (bos, BO.identity, "waiting #3")]

    with pytest.raises(actions.NotAllowed, match="may not cancel"):
        actions.cancel(manager, BO, running)
    with pytest.raises(actions.NotAllowed, match="may not delete"):
        actions.delete(manager, BO, waiting[0])
    assert manager.active() == [running] and waiting[0] in manager.queue()
    with pytest.raises(ValueError, match="still queued or running"):
        actions.delete(manager, ANA, waiting[0])
    actions.cancel(manager, ANA, waiting[0])
    actions.cancel(manager, ROOT, running)
    assert manager.wait(running, RUN_TIMEOUT_S) == "cancelled"
    assert manager.wait(waiting[0], RUN_TIMEOUT_S) == "cancelled"
    actions.delete(manager, ROOT, waiting[0])
    assert manager.store.run(waiting[0]) is None
    for run_id in (waiting[1], bos):
        manager.wait(run_id, RUN_TIMEOUT_S)
    assert manager.store.runs()["owner"].notna().all()
    trail = manager.store.audit()
    assert sorted(zip(trail["actor"], trail["action"], trail["run_id"])) == sorted([
        (ANA.identity, "launch", running), (ANA.identity, "launch", waiting[0]), (ANA.identity, "launch", waiting[1]),
        (BO.identity, "launch", bos), (ANA.identity, "cancel", waiting[0]), (ROOT.identity, "cancel", running),
        (ROOT.identity, "delete", waiting[0])])
