"""Who is using the app (issue 33): the sign-in gate every page passes, the user's role, and the queue panel.

On localhost without a provider the gate lets the one local user (an admin) through, as before sign-in
existed; with a provider in secrets.toml a signed-out visitor sees only the sign-in page; on a network
address without either it refuses to serve anything.
"""
from __future__ import annotations

import os
from typing import Any

import streamlit as st

from batchscope.team import actions, roles, serving
from batchscope.team.roles import User
from batchscope.ui import resources
from batchscope.ui.plain_text import plain

USER_KEY = "batchscope_user"
NEXT_KEY = "batchscope-after-sign-in"  # sessionStorage: the deep link a signed-out visitor opened
# The sign-in round trip ends on the home page (Streamlit's callback goes to the base URL): the page a
# visitor asked for is kept in this tab's sessionStorage and opened again once they are signed in.
REMEMBER_JS = f"<script>sessionStorage.setItem('{NEXT_KEY}', location.pathname + location.search);</script>"
RETURN_JS = (f"<script>const next = sessionStorage.getItem('{NEXT_KEY}'); if (next) {{"
             f" sessionStorage.removeItem('{NEXT_KEY}');"
             f" if (next.startsWith('/') && !next.startsWith('//') && next !== location.pathname + location.search)"
             f" location.replace(next); }}</script>")


@st.cache_resource(show_spinner=False)
def team_config() -> roles.TeamConfig:
    """The team file, read once per server process (a bad entry raises TeamConfigError, not cached)."""
    return roles.load()


def auth_settings() -> dict[str, Any]:
    """secrets.toml's [auth] table as plain dicts ({} without one)."""
    try:
        return dict(st.secrets.to_dict().get("auth") or {})
    except FileNotFoundError:
        return {}


def providers(auth: dict[str, Any]) -> list[str | None]:
    """The named providers ([auth.NAME] tables), or [None] for the one configured in [auth] itself."""
    named = [name for name, value in auth.items()
             if isinstance(value, dict) and all(value.get(key) for key in serving.PROVIDER_KEYS)]
    return named or [None]


def signed_in_user(config: roles.TeamConfig) -> User | None:
    """The signed-in user with their role, or None for a visitor who has not signed in."""
    if not st.user.is_logged_in:
        return None
    identity = str(st.user.get("email") or st.user.get("sub"))
    return User(identity, config.role_for(identity), st.user.get("name"))


def gate() -> User:
    """The user this session acts as; draws the sign-in or refusal page and stops for anyone else."""
    try:
        config = team_config()
    except roles.TeamConfigError as error:
        st.error(plain(f"BatchScope cannot start: {error}"))
        st.stop()
    auth = auth_settings()
    if not serving.provider_configured(auth):
        address = st.get_option("server.address") or ""
        # a reverse proxy in front brings the network to an app bound to loopback
        proxied = any(st.context.headers.get(name) for name in ("X-Forwarded-For", "Forwarded"))
        if proxied or not serving.is_loopback(address):
            if os.environ.get(serving.TRUSTED_ENV) != "1":
                st.error(plain(serving.refusal(["--server.address", address], False, [], proxied) or ""))
                st.stop()
            st.warning(f"Served without sign-in on a trusted network ({serving.TRUSTED_FLAG}): everyone who "
                       f"reaches this address acts as the one local admin.", icon=":material/lock_open:")
        st.session_state[USER_KEY] = roles.LOCAL
        return roles.LOCAL
    user = signed_in_user(config)
    if user is None:
        sign_in_page(auth)
        st.stop()
    issued = st.user.get("iat")
    if st.session_state.get("batchscope_sign_in_recorded") != issued:  # once a session, not every rerun
        actions.sign_in(resources.store(), user, issued)
        st.session_state["batchscope_sign_in_recorded"] = issued
    st.session_state[USER_KEY] = user
    with st.sidebar:
        st.html(RETURN_JS, unsafe_allow_javascript=True)
        st.caption(f"Signed in as **{user.label}** · {user.role}")
        if st.button("Sign out", key="sign_out", icon=":material/logout:"):
            st.logout()
    return user


def sign_in_page(auth: dict[str, Any]) -> None:
    """All a signed-out visitor sees: what this is and a button per provider."""
    st.html(REMEMBER_JS, unsafe_allow_javascript=True)
    st.title("BatchScope")
    st.markdown("Sign in with your team's account to browse runs, launch sweeps and manage your own.")
    for name in providers(auth):
        if st.button(f"Sign in with {name}" if name else "Sign in", type="primary", key=f"sign_in_{name}",
                     icon=":material/login:"):
            st.login(name)  # None: the provider configured in [auth] itself


def user() -> User:
    """The user the gate let in for this rerun (pages run after app.py's gate). A page run without the
    gate (a page test) is the local user only where no provider is configured, else a mere viewer."""
    if USER_KEY in st.session_state:
        return st.session_state[USER_KEY]
    return User("anonymous", "viewer") if serving.provider_configured(auth_settings()) else roles.LOCAL


def queue_panel() -> None:
    """Whose sweep runs now and what waits behind it, so a full queue has names on it."""
    board = actions.queue_board(resources.jobs())
    if not board:
        return
    with st.container(border=True):
        st.markdown(f"**Queue** (each user may have {team_config().queue_limit} sweep(s) waiting)")
        for entry in board:
            st.caption(plain(f"{entry.place}: {entry.name} ({entry.run_id}) · {entry.owner}"))
