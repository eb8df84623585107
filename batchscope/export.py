"""A run's report to send after a demo: one HTML file that opens with no network, and a PNG of any chart.

The HTML holds every chart as its Vega-Lite spec with the Vega, Vega-Lite and vega-embed runtime inlined
(vl-convert bundles them), so a reader can still hover for values offline; its words are the Markdown of
`batchscope.report` (the same sentences `python -m batchscope report` prints), so the two never disagree.
PNGs are drawn by the same bundled Vega, without a browser.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime

import vl_convert
from markdown_it import MarkdownIt

from batchscope.explain.step import Step
from batchscope.report import Report, body_lines, head_lines

PNG_SCALE = 2  # sharp on a slide or a high-density screen
EMBED_OPTIONS = {"renderer": "svg", "actions": {"export": True, "source": False, "compiled": False, "editor": False}}
RUN_CHARTS = "Throughput, latency, utilisation and memory along the sweep"
DRAWN = "data-charts-drawn"  # set on <body> once every chart is drawn (a check can wait on it)
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1200px; margin: 2rem auto;
       padding: 0 1rem; color: #262730; line-height: 1.45; }
table { border-collapse: collapse; font-size: 0.85rem; display: block; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
figure { margin: 2rem 0; } figcaption { font-weight: 600; font-size: 1.15rem; margin-bottom: 0.5rem; }
.exported { color: #808495; font-size: 0.85rem; }
"""
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")  # names are the user's: never raw HTML


@dataclass(frozen=True)
class Figure:
    """One chart of a report: a title, its Vega-Lite spec and the sentences that read it."""

    title: str
    spec: dict
    sentences: tuple[str, ...] = ()


def report_html(report: Report, figures: list[Figure], heading: str | None = None) -> str:
    """The self-contained report: the run's title and facts, the figures (under `heading`, if given), then the
    markers, notes and every point. Needs no network: the charts' runtime is inlined."""
    title = report.run.get("name") or report.run["run_id"]
    exported = datetime.now().strftime("%Y-%m-%d %H:%M")
    parts = [_markdown.render("\n".join(head_lines(report))),
             f'<p class="exported">Exported from BatchScope on {exported}. Hover a chart for its values.</p>']
    if heading:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
    for number, figure in enumerate(figures):
        parts.append(f'<figure><figcaption>{html.escape(figure.title)}</figcaption><div id="chart-{number}"></div>'
                     + "".join(_markdown.render(sentence) for sentence in figure.sentences) + "</figure>")
    parts.append(_markdown.render("\n".join(body_lines(report))))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · '
            f"BatchScope report</title><style>{STYLE}</style>\n<script>{vl_convert.javascript_bundle()}</script>\n"
            f"</head><body>\n{''.join(parts)}\n<script>{_draw_script(figures)}</script>\n</body></html>\n")


def _draw_script(figures: list[Figure]) -> str:
    """Draw each figure into its div; mark the body when all are drawn, or say in the page what failed."""
    specs = _script_json([figure.spec for figure in figures])
    return (f"const specs = {specs};\n"
            f"Promise.all(specs.map((spec, i) => vegaEmbed('#chart-' + i, spec, {_script_json(EMBED_OPTIONS)})))\n"
            f"  .then(() => document.body.setAttribute('{DRAWN}', String(specs.length)))\n"
            "  .catch(error => { document.body.insertAdjacentText('afterbegin', 'A chart could not be drawn: ' + error);"
            " console.error(error); });")


def _script_json(value: object) -> str:
    """JSON safe inside <script>: no `<` can close the element early (a run named `</script>`, say)."""
    return json.dumps(value, allow_nan=False).replace("<", "\\u003c")


def chart_png(spec: dict) -> bytes:
    """The chart as a PNG, drawn by the bundled Vega (no browser)."""
    return vl_convert.vegalite_to_png(spec, scale=PNG_SCALE)


def step_figures(steps: list[Step]) -> list[Figure]:
    """The Explain walk as figures, numbered as the page numbers them."""
    return [Figure(f"{number}. {step.title}", step.chart.to_dict(), step.sentences)
            for number, step in enumerate(steps, start=1)]
