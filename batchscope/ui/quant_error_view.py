"""The Run page's per-layer error of a quantised run: each decoder matrix product against bfloat16's.

Why its own view: the logits cosine and greedy agreement beside it compound every product through the
network (and on random weights flip near-tied tokens); the error of each product alone is what the
weight format costs, comparable across models and with published figures (docs/quantisation.md).
"""
from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from runners.engines.quant_layout import LM_HEAD, MATRICES, product_name

from batchscope.store import Store
from batchscope.ui.plain_text import plain


def path_name(rows: int, kernel: str) -> str:
    return f"{rows} rows through {kernel}"


def summary_lines(errors: pd.DataFrame) -> list[str]:
    """Per kernel path: the median and worst product error, and where the worst is."""
    lines = []
    for (rows, kernel), path in errors.groupby(["rows", "kernel"], sort=True):
        worst = path.loc[path["rel_error"].idxmax()]
        lines.append(f"{path_name(rows, kernel)}: median {path['rel_error'].median():.2%}, worst "
                     f"{worst['rel_error']:.2%} ({product_name(int(worst['layer']), worst['matrix'])}) over "
                     f"{len(path)} products")
    return lines


def error_table(errors: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel path and layer, one column per matrix, errors in per cent."""
    table = errors.assign(path=[path_name(r, k) for r, k in zip(errors["rows"], errors["kernel"])],
                          error=errors["rel_error"] * 100)
    wide = table.pivot_table(index=["rows", "path", "layer"], columns="matrix", values="error", sort=False)
    wide = wide[[m for m in (*MATRICES, LM_HEAD) if m in wide.columns]].reset_index()
    wide = wide.drop(columns="rows").rename(columns={"path": "kernel path"})
    wide.columns.name = None
    return wide


def error_chart(errors: pd.DataFrame) -> alt.Chart:
    """Error (%) per layer, a line per matrix, a panel per kernel path in row order; half a layer of room at each
    end, so the first and last layers' points (a quantised lm_head's alone) are not cut by the frame."""
    data = errors.assign(path=[path_name(r, k) for r, k in zip(errors["rows"], errors["kernel"])],
                         error=errors["rel_error"] * 100).sort_values("rows", kind="stable")
    last = int(data["layer"].max())
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("layer:Q", title="layer", axis=alt.Axis(tickMinStep=1),
                scale=alt.Scale(domain=[-0.5, last + 0.5], nice=False)),
        y=alt.Y("error:Q", title="error vs bfloat16 (%)", scale=alt.Scale(zero=True)),
        color=alt.Color("matrix:N", title="matrix"),
        tooltip=["path:N", "layer:Q", "matrix:N", alt.Tooltip("error:Q", format=".3f", title="error (%)")],
    ).properties(width=320, height=200).facet(column=alt.Column("path:N", title=None,
                                                                sort=list(dict.fromkeys(data["path"]))))


def show(store: Store, run_id: str) -> None:
    """The run's per-product errors, when it is a quantised run that recorded them."""
    errors = store.quant_errors(run_id)
    if errors.empty:
        return
    with st.expander("Per-layer error of the quantised products", expanded=False):
        st.caption("Each decoder matrix product (fused QKV, o_proj, fused gate/up, down) of one bfloat16 prefill "
                   "of 4 × 32 prompt tokens, recomputed from the same input with the quantised matrix by each "
                   "kernel path the run's steps take: ‖y_quantised − y_bfloat16‖ / ‖y_bfloat16‖. Unlike the "
                   "end-to-end figures above, it does not compound through the network, so it means the same "
                   "on random and on trained weights."
                   + (f" A quantised {LM_HEAD} is drawn as the layer after the last, from the 4 prompts' last "
                      f"tokens (the only rows the prefill runs it on)." if LM_HEAD in set(errors["matrix"]) else ""))
        for line in summary_lines(errors):
            st.markdown(f"- {plain(line)}")
        st.altair_chart(error_chart(errors), width="content")
        table = error_table(errors)
        st.dataframe(table, hide_index=True, width="stretch",
                     column_config={name: st.column_config.NumberColumn(format="%.3f %%")
                                    for name in table.columns if name not in ("kernel path", "layer")})
