"""Serving BatchScope to a team: roles, who may do what, and whether it may be served at all.

`roles` and `serving` use the standard library only, so run.sh can check the configuration with the
system python3 before it installs anything; `actions` holds the permission-checked run actions.
"""
