"""The app's charts: `frames` builds the data in pandas, `specs_run` and `specs_pages` draw it (Vega-Lite
dicts, or Altair where a chart is small), `layout` places panels and labels, `palette` holds the colours.
The pages call the five charts below; everything else is imported from its module."""
from batchscope.charts.specs_pages import best_throughput_chart, length_histogram, memory_split_by_run
from batchscope.charts.specs_run import linked_charts, overlay_charts

__all__ = ["best_throughput_chart", "length_histogram", "linked_charts", "memory_split_by_run", "overlay_charts"]
