"""Audit (admins): who signed in, launched, cancelled, renamed, deleted or imported which run, and when."""
from __future__ import annotations

import streamlit as st

from batchscope.ui import resources, team_view

st.title("Audit")
if team_view.user().role != "admin":  # the page is listed for admins only; a typed URL is refused too
    st.error("Only admins may see the audit trail.")
    st.stop()
trail = resources.store().audit()
st.caption("Newest first, times in UTC. Sign-ins are recorded once per ID token; CLI imports name the OS user.")
actors_col, actions_col = st.columns(2)
actors = actors_col.multiselect("Who", sorted(trail["actor"].unique()), key="audit_actors", placeholder="anyone")
kinds = actions_col.multiselect("Action", sorted(trail["action"].unique()), key="audit_actions", placeholder="any")
shown = trail[trail["actor"].isin(actors or trail["actor"]) & trail["action"].isin(kinds or trail["action"])]
st.dataframe(shown.fillna({"run_id": "", "detail": ""}), hide_index=True, width="stretch",  # empty, never "None"
             column_config={"occurred_at": st.column_config.DatetimeColumn("when (UTC)", format="YYYY-MM-DD HH:mm:ss"),
                            "actor": "who", "run_id": "run"})
