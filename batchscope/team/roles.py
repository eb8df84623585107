"""The team's roles: who is a viewer, a tuner or an admin, read from a small TOML file at start.

A bad entry stops the app with a message naming the file, the entry and what is allowed, because a
typo in a role file would otherwise silently give someone the default role (or too much).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("viewer", "tuner", "admin")  # each may do what the ones before it may
DEFAULT_QUEUE_LIMIT = 3
DEFAULT_KEY_ENV_PREFIX = "BATCHSCOPE_KEY_"  # the only environment variables a tuner may name as an API key
LOCAL_USER = "local"  # the one user of an app served on localhost without a provider
_EMAIL = re.compile(r"^[^@\s]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_DOMAIN = re.compile(r"^@?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_KEYS = {"default_role", "queue_limit", "key_env_prefix", "roles"}
_ENV_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TeamConfigError(ValueError):
    """A team file the app refuses to start with; the message says which entry and how to fix it."""


@dataclass(frozen=True)
class TeamConfig:
    """Emails and domains to roles, the role of everyone else, how many sweeps one user may queue, and how
    the environment variables a tuner may send as an endpoint's API key begin."""

    emails: dict[str, str] = field(default_factory=dict)
    domains: dict[str, str] = field(default_factory=dict)
    default_role: str = "viewer"
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    key_env_prefix: str = DEFAULT_KEY_ENV_PREFIX

    def role_for(self, identity: str) -> str:
        """An exact email wins over its domain, the domain over the default."""
        identity = identity.strip().lower()
        if identity in self.emails:
            return self.emails[identity]
        domain = identity.rpartition("@")[2]
        return self.domains.get(domain, self.default_role)


def team_file() -> Path:
    """$BATCHSCOPE_TEAM, else .streamlit/team.toml in the repository (git-ignored; see team.example.toml)."""
    value = os.environ.get("BATCHSCOPE_TEAM")
    return Path(value).expanduser() if value else Path(__file__).resolve().parents[2] / ".streamlit" / "team.toml"


def _role(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in ROLES:
        raise TeamConfigError(f"{where}: role {value!r} is not one of {', '.join(ROLES)}")
    return value.strip().lower()


def parse(data: dict[str, Any], source: str = "team config") -> TeamConfig:
    """A TeamConfig from the file's parsed TOML; TeamConfigError on the first bad entry."""
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise TeamConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}")
    default = _role(data.get("default_role", "viewer"), f"{source}: default_role")
    limit = data.get("queue_limit", DEFAULT_QUEUE_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise TeamConfigError(f"{source}: queue_limit {limit!r} must be a whole number of at least 1")
    prefix = data.get("key_env_prefix", DEFAULT_KEY_ENV_PREFIX)
    if not isinstance(prefix, str) or not _ENV_PREFIX.match(prefix):
        raise TeamConfigError(f"{source}: key_env_prefix {prefix!r} must begin an environment variable's name "
                              f"(letters, digits and _), e.g. {DEFAULT_KEY_ENV_PREFIX}")
    rules = data.get("roles", {})
    if not isinstance(rules, dict):
        raise TeamConfigError(f"{source}: [roles] must be a table of \"email or domain\" = \"role\" entries")
    emails: dict[str, str] = {}
    domains: dict[str, str] = {}
    for key, value in rules.items():
        where = f"{source}: roles entry {key!r}"
        name = key.strip().lower()
        role = _role(value, where)
        if _EMAIL.match(name):
            emails[name] = role
        elif _DOMAIN.match(name):
            domains[name.lstrip("@")] = role
        else:
            raise TeamConfigError(f"{where} is neither an email (ana@example.com) nor a domain (example.com)")
    return TeamConfig(emails, domains, default, limit, prefix)


def load(path: Path | None = None) -> TeamConfig:
    """The team file's config; the defaults (everyone a viewer, 3 queued sweeps) when there is none."""
    import tomllib  # here, so a python3 older than 3.11 can still import this module's names

    path = path or team_file()
    if not path.is_file():
        return TeamConfig()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise TeamConfigError(f"{path}: cannot read it as TOML ({error})") from None
    return parse(data, str(path))


def at_least(role: str, needed: str) -> bool:
    """Whether `role` may do what `needed` may (admin ⊇ tuner ⊇ viewer)."""
    return ROLES.index(role) >= ROLES.index(needed)


@dataclass(frozen=True)
class User:
    """Who is acting: their identity (email, or the provider's subject), role and a name to show."""

    identity: str
    role: str
    name: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.identity})" if self.name and self.name != self.identity else self.identity


LOCAL = User(LOCAL_USER, "admin", "local user")  # localhost without a provider: everything, as before
