"""A team's dashboard in headless Chromium, signed in through a real OpenID Connect provider.

The provider is oidc-provider-mock (a standards-compliant provider, in this process on a free port);
the app is a real `streamlit run serve.py` with [auth] in its own secrets file and a team file. A
signed-out visitor sees only the sign-in page; tuner A launches a sweep; tuner B cannot cancel,
rename or delete it (no control); an admin cancels, renames and deletes it; the Audit page lists
each action with its user; a viewer cannot launch. The server-side refusals are tests/test_team.py's.
"""
from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, choose, free_port, serve_app, settle, shoot, type_into

playwright = pytest.importorskip("playwright.sync_api")
oidc = pytest.importorskip("oidc_provider_mock")

pytestmark = pytest.mark.browser
TUNER_A, TUNER_B, ADMIN, VIEWER = "ana@team.test", "bo@team.test", "root@team.test", "vi@team.test"
TEAM_TOML = f'''default_role = "viewer"
queue_limit = 3
[roles]
"{TUNER_A}" = "tuner"
"{TUNER_B}" = "tuner"
"{ADMIN}" = "admin"
'''


@pytest.fixture
def provider() -> Iterator[str]:
    """The identity provider, with the four users as one-click accounts carrying an email claim."""
    users = [oidc.User(sub=email, claims={"email": email, "name": email.split("@")[0].title()})
             for email in (TUNER_A, TUNER_B, ADMIN, VIEWER)]
    with oidc.run_server_in_thread(user_claims=users) as server:
        yield f"http://localhost:{server.server_port}"


@dataclass
class Served:
    """The app under test: its address, its history DB, and a stop that lets the test read that DB."""

    url: str
    db: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture
def team_server(tmp_path: Path, provider: str) -> Iterator[Served]:
    """The app served with sign-in configured for the provider."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    port = free_port()
    url = f"http://localhost:{port}"
    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text(f'''[auth]
redirect_uri = "{url}/oauth2callback"
cookie_secret = "{secrets.token_urlsafe(32)}"
client_id = "batchscope-test"
client_secret = "{secrets.token_urlsafe(16)}"
server_metadata_url = "{provider}/.well-known/openid-configuration"
''')
    (tmp_path / "team.toml").write_text(TEAM_TOML)
    db = tmp_path / "history.duckdb"
    env = {"BATCHSCOPE_DB": str(db), "BATCHSCOPE_RUNS": str(tmp_path / "runs"),
           "BATCHSCOPE_TEAM": str(tmp_path / "team.toml")}
    url, process, log = serve_app(tmp_path, env, "--secrets.files", str(secrets_file), port=port)
    served = Served(url, db, process)
    yield served
    served.stop()
    log.close()
    print((tmp_path / "streamlit.log").read_text()[-3000:])


@pytest.fixture
def browser() -> Iterator:
    with playwright.sync_playwright() as driver:
        opened = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield opened
        opened.close()


def sign_in(browser, url: str, path: str, email: str):
    """A fresh browser profile opens `path` signed out, signs in as `email` at the provider, and is
    brought back to `path` (the deep link survives the round trip)."""
    tab = browser.new_context(viewport={"width": 1500, "height": 2000}).new_page()
    tab.goto(url + path)
    tab.get_by_role("button", name="Sign in").wait_for(timeout=60_000)
    tab.get_by_role("button", name="Sign in").click()
    tab.get_by_role("button", name=email, exact=True).click()  # the provider's one-click account
    tab.get_by_text(f"Signed in as").first.wait_for(timeout=60_000)
    settle(tab)
    return tab


def launch_long_sweep(tab, name: str) -> str:
    """Fill New sweep with a tiny CPU sweep long enough to still run while others look; its run id."""
    tab.get_by_role("heading", name="New sweep").wait_for()
    settle(tab)
    choose(tab, "Preset", "tiny")
    choose(tab, "dtype", "float32")
    choose(tab, "Device", "cpu")
    tab.get_by_text("Explicit list", exact=True).click()
    settle(tab)
    type_into(tab, "Batch sizes", "1,2,4,8,16,32,64,128,256")
    type_into(tab, "Prompt length", "fixed:16")
    type_into(tab, "Output length", "fixed:1024")
    type_into(tab, "Repeats", "5")  # minutes of work: the admin cancels it long before it ends
    type_into(tab, "Run name (optional)", name)
    tab.get_by_role("button", name="Launch sweep").click()
    tab.wait_for_url("**/run?run=*", timeout=30_000)
    return tab.url.split("run=")[1].split("&")[0]


def test_sign_in_roles_ownership_and_audit(team_server: Served, browser) -> None:
    url = team_server.url
    visitor = browser.new_context().new_page()
    visitor.goto(f"{url}/history")
    visitor.get_by_role("button", name="Sign in").wait_for(timeout=60_000)
    assert visitor.get_by_role("heading", name="History").count() == 0
    assert visitor.get_by_role("link", name="New sweep").count() == 0

    ana = sign_in(browser, url, "/new_sweep", TUNER_A)
    run_id = launch_long_sweep(ana, "ana's sweep")
    ana.get_by_role("button", name="Cancel sweep").wait_for(timeout=60_000)  # her own: she may

    bo = sign_in(browser, url, f"/run?run={run_id}", TUNER_B)
    bo.get_by_text("Only its owner or an admin may cancel this sweep.").wait_for(timeout=60_000)
    assert bo.get_by_role("button", name="Cancel sweep").count() == 0
    bo.get_by_role("link", name="History").first.click()
    bo.get_by_role("heading", name="History").wait_for()
    bo.get_by_text("none of these is yours").wait_for(timeout=30_000)
    assert bo.get_by_role("button", name="Rename").count() == 0
    assert bo.get_by_role("button", name="Delete…").count() == 0
    shoot(bo, "team-tuner-b-history.png")

    root = sign_in(browser, url, f"/run?run={run_id}", ADMIN)
    root.get_by_role("button", name="Cancel sweep").click()
    root.get_by_text("The sweep was cancelled").wait_for(timeout=120_000)
    root.get_by_role("link", name="History").first.click()
    root.get_by_role("heading", name="History").wait_for()
    settle(root)
    choose(root, "Run", f"ana's sweep · float32 · cpu — {run_id}")
    type_into(root, "New name", "renamed by root")
    root.get_by_role("button", name="Rename").click()
    try:
        root.locator('[data-testid="stDataFrame"] td', has_text="renamed by root").first.wait_for(
            state="attached", timeout=30_000)
    except playwright.TimeoutError:
        shoot(root, "team-rename.png")
        raise
    settle(root)
    root.get_by_role("button", name="Delete…").click()
    settle(root)
    root.get_by_role("button", name="Yes, delete").click()
    # the run leaves the table before the next click, as a user sees it go: a link clicked while the delete
    # still runs is folded into the page's own rerun after it (Streamlit keeps the newer request's page), and
    # under load the 400 ms of `settle` ended before that rerun began (the Audit heading never came)
    root.locator('[data-testid="stDataFrame"] td', has_text="renamed by root").first.wait_for(
        state="detached", timeout=60_000)
    settle(root)
    root.get_by_role("link", name="Audit").first.click()
    root.get_by_role("heading", name="Audit").wait_for()
    settle(root)
    shoot(root, "team-audit.png")
    cells = root.locator('[data-testid="stDataFrame"] td')  # the grid's accessible cells (drawn on a canvas)
    cells.first.wait_for(state="attached", timeout=30_000)
    audit_rows = " | ".join(cells.all_text_contents())
    for action in ("launch", "cancel", "rename", "delete", "sign-in"):
        assert action in audit_rows, audit_rows
    for email in (TUNER_A, TUNER_B, ADMIN):
        assert email in audit_rows, audit_rows

    viewer = sign_in(browser, url, "/new_sweep", VIEWER)
    viewer.get_by_text("launching sweeps needs the tuner role").wait_for(timeout=30_000)
    assert viewer.get_by_role("button", name="Launch sweep").count() == 0
    assert viewer.get_by_role("link", name="Audit").count() == 0

    team_server.stop()  # the app holds the DB's lock; read what it wrote once it is gone
    con = duckdb.connect(str(team_server.db), read_only=True)
    try:
        trail = con.execute("SELECT actor, action, run_id FROM audit ORDER BY occurred_at").fetchall()
        owners = con.execute("SELECT count(*) FROM runs WHERE owner IS NULL").fetchone()[0]
    finally:
        con.close()
    assert owners == 0
    assert [row for row in trail if row[1] != "sign-in"] == [
        (TUNER_A, "launch", run_id), (ADMIN, "cancel", run_id), (ADMIN, "rename", run_id), (ADMIN, "delete", run_id)]
    assert {row[0] for row in trail if row[1] == "sign-in"} == {TUNER_A, TUNER_B, ADMIN, VIEWER}
