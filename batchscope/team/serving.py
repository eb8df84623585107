"""Whether BatchScope may be served where it is asked to: sign-in, or loopback, or a trusted network.

Standard library only: run.sh runs `python3 -m batchscope.team.serving ARGS...` before it makes the
virtualenv, so a refused start costs nothing and says in one line what to configure.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from batchscope.team import roles

TRUSTED_FLAG = "--trusted-network"
TRUSTED_ENV = "BATCHSCOPE_TRUSTED_NETWORK"  # run.sh sets it for the app when TRUSTED_FLAG was given
PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")
SHARED_KEYS = ("redirect_uri", "cookie_secret")


def is_loopback(address: str) -> bool:
    """localhost, 127.0.0.0/8 and ::1 reach only this machine; anything else (0.0.0.0, '') the network."""
    address = address.strip().strip("[]").lower()
    return address == "localhost" or address.startswith("127.") or address == "::1"


def served_address(args: list[str], default: str = "localhost") -> str:
    """The address Streamlit binds to from run.sh's arguments: the last --server.address given wins."""
    address = default
    for index, arg in enumerate(args):
        if arg == "--server.address" and index + 1 < len(args):
            address = args[index + 1]
        elif arg.startswith("--server.address="):
            address = arg.split("=", 1)[1]
    return address


def secrets_files(cwd: Path | None = None) -> list[Path]:
    """Where Streamlit reads secrets by default: the user's, then the project's (which wins)."""
    return [Path.home() / ".streamlit" / "secrets.toml", (cwd or Path.cwd()) / ".streamlit" / "secrets.toml"]


def _read(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # python3 < 3.11: no parser, so the file must be checked by the app itself
        return {"auth": {"_unparsed": True}} if "[auth" in path.read_text() else {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def auth_section(files: list[Path]) -> dict[str, Any]:
    """The merged [auth] table of the secrets files (a later file's keys win, as in Streamlit)."""
    merged: dict[str, Any] = {}
    for path in files:
        if path.is_file():
            merged.update(_read(path).get("auth") or {})
    return merged


def provider_configured(auth: dict[str, Any]) -> bool:
    """[auth] has redirect_uri and cookie_secret, and a provider (itself or an [auth.NAME] table) has
    client_id, client_secret and server_metadata_url: what st.login needs."""
    if auth.get("_unparsed"):
        return True
    if not all(auth.get(key) for key in SHARED_KEYS):
        return False
    providers = [auth] + [value for value in auth.values() if isinstance(value, dict)]
    return any(all(provider.get(key) for key in PROVIDER_KEYS) for provider in providers)


def refusal(args: list[str], trusted: bool, files: list[Path] | None = None, proxied: bool = False) -> str | None:
    """The one line run.sh prints when it must not start (and the app shows, also when a reverse proxy
    forwards the network to a loopback address); None when it may."""
    address = served_address(args)
    found = auth_section(files if files is not None else secrets_files())
    if (is_loopback(address) and not proxied) or trusted or provider_configured(found):
        return None
    where = f"{address} behind a reverse proxy" if proxied else address or "every address"
    return (f"batchscope: refusing to serve on {where} without sign-in: configure an "
            f"OpenID Connect provider under [auth] in .streamlit/secrets.toml (copy .streamlit/secrets.example.toml; "
            f"docs/team.md), or add {TRUSTED_FLAG} to serve without sign-in on a network you trust")


def main(argv: list[str]) -> int:
    """Exit 2 with one line on stderr when the start must be refused, else 0."""
    problem = refusal(argv, trusted=os.environ.get(TRUSTED_ENV) == "1")
    if problem is None:
        try:
            roles.load()  # the team file is checked here too, so a typo stops the start, not the first page
        except (roles.TeamConfigError, ImportError) as error:  # ImportError: no tomllib; the app checks it
            problem = None if isinstance(error, ImportError) else f"batchscope: {error}"
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
