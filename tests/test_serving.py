"""Safe serving (issue 33): run.sh refuses a network address without a sign-in provider, in one line and
before it installs anything; loopback, a provider, or --trusted-network let it start."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from batchscope.team import serving
from tests.runner_helpers import REPO

SECRETS = """[auth]
redirect_uri = "https://batchscope.team.test/oauth2callback"
cookie_secret = "a-long-random-string"
{provider}client_id = "batchscope"
client_secret = "s3cret"
server_metadata_url = "https://id.team.test/.well-known/openid-configuration"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of run.sh and what it runs before the virtualenv, in a folder with no .venv and a bare HOME
    (so neither this checkout's nor the user's secrets count)."""
    root = tmp_path / "checkout"
    for name in ("run.sh", "scripts/venv.sh", "requirements.txt", "batchscope/__init__.py",
                 "batchscope/team/__init__.py", "batchscope/team/roles.py", "batchscope/team/serving.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    (tmp_path / "home").mkdir()
    return root


def run(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HOME": str(checkout.parent / "home"), **env}
    environment.pop("BATCHSCOPE_TEAM", None)
    return subprocess.run(["bash", str(checkout / "run.sh"), *args], cwd=checkout, env=environment,
                          capture_output=True, text=True, timeout=60)


def check(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """The check run.sh runs first, with the same system python3."""
    environment = {**os.environ, "HOME": str(checkout.parent / "home")}
    environment.pop("BATCHSCOPE_TEAM", None)
    return subprocess.run(["python3", "-m", "batchscope.team.serving", *args], cwd=checkout, env=environment,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("address", [["--server.address", "0.0.0.0"], ["--server.address=192.168.1.20"],
                                     ["--server.address", ""]])
def test_run_sh_refuses_a_network_address_without_a_provider_before_installing(checkout: Path,
                                                                                address: list[str]) -> None:
    done = run(checkout, *address)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "without sign-in" in lines[0] and ".streamlit/secrets.toml" in lines[0] and "--trusted-network" in lines[0]
    assert not (checkout / ".venv").exists()  # refused before the virtualenv was made


def test_a_provider_loopback_or_the_trusted_flag_passes_the_check(checkout: Path) -> None:
    assert check(checkout, "--server.address", "0.0.0.0").returncode == 2
    assert check(checkout).returncode == 0  # run.sh's own default: localhost
    assert check(checkout, "--server.address", "127.0.0.1").returncode == 0
    trusted = subprocess.run(["python3", "-m", "batchscope.team.serving", "--server.address", "0.0.0.0"],
                             cwd=checkout, capture_output=True, text=True,
                             env={**os.environ, "HOME": str(checkout.parent / "home"), serving.TRUSTED_ENV: "1"})
    assert trusted.returncode == 0, trusted.stderr
    (checkout / ".streamlit").mkdir()
    (checkout / ".streamlit" / "secrets.toml").write_text(SECRETS.format(provider=""))
    assert check(checkout, "--server.address", "0.0.0.0").returncode == 0


def test_a_bad_team_file_stops_the_start_with_its_message(checkout: Path) -> None:
    (checkout / ".streamlit").mkdir()
    (checkout / ".streamlit" / "team.toml").write_text('[roles]\n"ana@team.test" = "superuser"\n')
    done = check(checkout)
    assert done.returncode == 2
    assert "roles entry 'ana@team.test': role 'superuser' is not one of viewer, tuner, admin" in done.stderr


def test_what_counts_as_a_provider_and_as_loopback(tmp_path: Path) -> None:
    assert serving.is_loopback("localhost") and serving.is_loopback("127.0.0.1") and serving.is_loopback("[::1]")
    assert not serving.is_loopback("0.0.0.0") and not serving.is_loopback("") and not serving.is_loopback("10.0.0.2")
    assert serving.served_address(["--server.address", "localhost", "--server.address", "0.0.0.0"]) == "0.0.0.0"
    named, default, partial = tmp_path / "named.toml", tmp_path / "default.toml", tmp_path / "partial.toml"
    named.write_text(SECRETS.format(provider="[auth.google]\n"))
    default.write_text(SECRETS.format(provider=""))
    partial.write_text('[auth]\nredirect_uri = "http://x.test/oauth2callback"\ncookie_secret = "c"\n')
    for path, configured in ((named, True), (default, True), (partial, False), (tmp_path / "none.toml", False)):
        assert serving.provider_configured(serving.auth_section([path])) is configured, path


def test_the_app_itself_refuses_a_network_address_or_a_proxy_without_a_provider() -> None:
    assert serving.refusal(["--server.address", "localhost"], trusted=False, files=[]) is None
    behind = serving.refusal(["--server.address", "localhost"], trusted=False, files=[], proxied=True)
    assert behind is not None and "localhost behind a reverse proxy without sign-in" in behind
    assert serving.refusal(["--server.address", "localhost"], trusted=True, files=[], proxied=True) is None


@pytest.fixture
def network_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """app.py in Streamlit's AppTest, configured to bind 0.0.0.0 (as if started without run.sh)."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BATCHSCOPE_DB", str(tmp_path / "history.duckdb"))
    monkeypatch.setenv("BATCHSCOPE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("BATCHSCOPE_DEMO", str(tmp_path / "no-demo-runs"))
    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    yield lambda: AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    config.set_option("server.address", before)


def test_started_on_the_network_without_run_sh_the_app_shows_only_the_refusal(network_app, monkeypatch) -> None:
    monkeypatch.delenv(serving.TRUSTED_ENV, raising=False)
    refused = network_app()
    shown = [e.value.replace("\\", "") for e in refused.error]  # plain() escapes Markdown
    assert shown and "refusing to serve on 0.0.0.0 without sign-in" in shown[0]
    assert not [t for t in refused.title if t.value == "BatchScope"]
    monkeypatch.setenv(serving.TRUSTED_ENV, "1")
    trusted = network_app()
    assert any("trusted network" in w.value for w in trusted.warning)
    assert [t.value for t in trusted.title] == ["BatchScope"]
