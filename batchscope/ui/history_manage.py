"""History's "Manage a run": rename and delete, each done in its button's callback.

A callback runs before the page's script, so the run it starts draws the outcome: no `st.rerun()` follows the
action. One that did would fold a link the user clicked while the action ran into a rerun of History (Streamlit's
server keeps the newer request's page), and the click would be lost (docs/architecture.md).
"""
from __future__ import annotations

import streamlit as st

from batchscope.store import Store
from batchscope.team import actions
from batchscope.team.roles import User
from batchscope.ui import history_view, resources
from batchscope.ui.plain_text import plain

CONFIRM = "confirm_delete"  # the run whose deletion waits for "Yes, delete"
RENAME_TEXT = "rename_text"  # kept after a refused rename, to be fixed; cleared after a done one
PROBLEM = "manage_problem"  # why the last rename or delete did nothing, said once under the buttons


def show_manage(store: Store, user: User, target: str, label: str) -> None:
    """Rename `target`, or delete it after a confirmation (with its folder when asked)."""
    rename_col, delete_col = st.columns(2)
    with rename_col:
        st.text_input("New name", key=RENAME_TEXT)
        st.button("Rename", key="rename_button", icon=":material/edit:", disabled=bool(store.read_only),
                  help=store.read_only, on_click=_rename, args=(store, user, target))
    with delete_col:
        also_folder = st.checkbox("Also delete its run folder on disk", key="delete_folder")
        if st.session_state.get(CONFIRM) != target:
            st.button("Delete…", key="delete_button", icon=":material/delete:", disabled=bool(store.read_only),
                      help=store.read_only, on_click=_ask, args=(target,))
        else:
            st.warning(plain(f"Delete {label} ({target}) from the history{' and its folder' if also_folder else ''}"
                             f"? This cannot be undone."))
            yes_col, no_col = st.columns(2)
            yes_col.button("Yes, delete", type="primary", key="delete_confirm", on_click=_delete,
                           args=(user, target))
            no_col.button("Keep it", key="delete_cancel", on_click=st.session_state.pop, args=(CONFIRM, None))
    problem = st.session_state.pop(PROBLEM, None)
    if problem:
        st.error(plain(problem))


def _ask(target: str) -> None:
    st.session_state[CONFIRM] = target


def _rename(store: Store, user: User, target: str) -> None:
    new_name = st.session_state.get(RENAME_TEXT, "")
    problem = history_view.rename_problem(new_name)
    if problem is None:
        try:
            actions.rename(store, user, target, new_name)
        except actions.NotAllowed as refused:
            problem = str(refused)
        else:
            st.toast(plain(f"Renamed to {new_name.strip()!r}."))
            st.session_state[RENAME_TEXT] = ""  # done: the field is ready for the next run's name
    st.session_state[PROBLEM] = problem


def _delete(user: User, target: str) -> None:
    try:
        actions.delete(resources.jobs(), user, target, delete_folder=bool(st.session_state.get("delete_folder")))
    except (ValueError, actions.NotAllowed) as problem:
        st.session_state[PROBLEM] = str(problem)
    else:
        st.session_state.pop(CONFIRM, None)
        st.toast(plain(f"Deleted {target}."))
