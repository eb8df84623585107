"""On a served instance, an endpoint sweep's restart command (a program run on this host) is an admin's,
and its API key variable (sent to any URL) must be one set aside for keys: checked on the server and
said beside the field on New sweep."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from batchscope.jobs import JobManager
from batchscope.team import actions, roles
from batchscope.team.roles import TeamConfigError, User
from tests.test_pages import home, open_page, texts  # noqa: F401 (home is a fixture)

ANA, ROOT = User("ana@team.test", "tuner"), User("root@team.test", "admin")
ENDPOINT = {"model": "tiny", "engine": "endpoint", "mode": "endpoint", "concurrency": "1", "num_requests": 4,
            "prompt_len": "fixed:8", "output_len": "fixed:2", "url": "http://127.0.0.1:9/v1"}


def test_only_an_admin_may_set_a_restart_command_and_keys_come_from_set_aside_variables() -> None:
    command = {**ENDPOINT, "server_command": "sh -c 'curl evil.test'"}
    assert set(actions.endpoint_problems(ANA, command, "BATCHSCOPE_KEY_")) == {"server_command"}
    assert actions.endpoint_problems(ROOT, command, "BATCHSCOPE_KEY_") == {}
    stolen = {**ENDPOINT, "api_key_env": "AWS_SECRET_ACCESS_KEY"}
    assert "must begin with BATCHSCOPE_KEY_" in actions.endpoint_problems(ANA, stolen, "BATCHSCOPE_KEY_")["api_key_env"]
    assert actions.endpoint_problems(ANA, {**ENDPOINT, "api_key_env": "BATCHSCOPE_KEY_VLLM"}, "BATCHSCOPE_KEY_") == {}
    assert actions.endpoint_problems(ANA, {**ENDPOINT, "api_key_env": "TEAM_KEY_A"}, "TEAM_KEY_") == {}


def test_the_key_prefix_is_a_team_setting_checked_at_start() -> None:
    assert roles.parse({}).key_env_prefix == "BATCHSCOPE_KEY_"
    assert roles.parse({"key_env_prefix": "TEAM_KEY_"}).key_env_prefix == "TEAM_KEY_"
    with pytest.raises(TeamConfigError, match="key_env_prefix"):
        roles.parse({"key_env_prefix": "1 bad"})


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[JobManager]:
    opened = JobManager.instance(tmp_path / "history.duckdb", tmp_path / "runs")
    yield opened
    opened.shutdown()


def test_a_tuners_forced_launch_is_refused_before_anything_is_queued(manager: JobManager) -> None:
    for refused in ({"server_command": "touch /tmp/owned"}, {"api_key_env": "HOME"}):
        with pytest.raises(actions.NotAllowed):
            actions.launch(manager, ANA, {**ENDPOINT, **refused}, queue_limit=3)
    assert manager.store.runs().empty and manager.queue() == []


def test_new_sweep_names_the_refusal_beside_the_field(home, monkeypatch: pytest.MonkeyPatch) -> None:
    from batchscope.ui import team_view

    monkeypatch.setattr(team_view, "user", lambda: ANA)
    at = open_page("app_pages/new_sweep.py")
    at.selectbox(key="engine").set_value("endpoint").run()
    at.text_input(key="api_key_env").set_value("AWS_SECRET_ACCESS_KEY").run()
    assert any("must begin with BATCHSCOPE_KEY_" in e for e in texts(at, "error")), texts(at, "error")
    assert at.button(key="launch").disabled
