"""Everything the Explain page says: `walk` lays out the six steps through one run, one module per step
(`throughput`, `latency`, `utilisation`, `memory`, `roofline`, `working_point`) builds its sentences from
the analysis, `engines`, `continuous`, `quantised` and `parallel` are the chapters across runs (which
`partners` picks), `charts` draws one panel per step, and `words` holds the wording they share.
No streamlit here."""
