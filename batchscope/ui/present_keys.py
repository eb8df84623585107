"""Keyboard and clicker control for Explain's present mode, and the viewport it reports.

Presentation clickers send PageDown/PageUp (some Space or the arrows), and a presenter at a laptop
uses the arrows: each key clicks the page's own Next or Previous button, so a key and a click take the
same path through the page (and a disabled button at either end does nothing). Keys typed into a
field are left alone. The same small component tells the page the window's size, so present mode can
size its chart to fit the screen without scrolling, and Run and History's overlay can widen their panels.
"""
from __future__ import annotations

import streamlit as st

from batchscope.charts.layout import WIDEST_DEFAULT_WINDOW

NEXT_KEYS = ("ArrowRight", "PageDown", " ")
PREVIOUS_KEYS = ("ArrowLeft", "PageUp")

# Runs in the app's page (components v2 are not in an iframe). One listener per window: a remount
# removes the one before, so a key never moves twice.
JS = """
export default function ({ data, setStateValue }) {
  const doc = window.document;
  const typing = (el) => el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)
    || el.getAttribute("role") === "combobox" || el.getAttribute("role") === "slider");
  const onKey = (event) => {
    if (event.altKey || event.ctrlKey || event.metaKey || event.defaultPrevented || typing(event.target)) return;
    const key = data.next.includes(event.key) ? data.next_button
      : data.previous.includes(event.key) ? data.previous_button : null;
    if (!key) return;
    event.preventDefault();  // no page scroll, and Space on a focused button does not click it a second time
    if (event.target && event.target.blur) event.target.blur();
    const button = doc.querySelector(`.st-key-${key} button`);
    if (button && !button.disabled) button.click();
  };
  const drawnAlike = ([width, height]) => {  // a size the page draws as it did before any was said
    const [lo, hi, low, high] = data.quiet || [];
    return Boolean(data.quiet) && width >= lo && (hi === null || width <= hi)
      && height >= low && (high === null || height <= high);
  };
  const report = () => {
    const size = [window.innerWidth, window.innerHeight];
    if (String(size) === window.__batchscopeViewport) return;  // said already: no rerun for nothing
    if (!window.__batchscopeViewport && drawnAlike(size)) return;  // nothing said yet, and nothing would change
    window.__batchscopeViewport = String(size);
    setStateValue("viewport", size);
  };
  let timer = null;
  const onResize = () => { clearTimeout(timer); timer = setTimeout(report, 250); };
  // A size said after a click on a link to another page reruns this page, and the server folds that rerun into
  // the navigation: the click is lost. A size not said yet is the next page's to say, when its own copy mounts.
  const onLeave = (event) => {
    const link = event.target instanceof Element ? event.target.closest("a[href]") : null;
    if (link && !link.target && link.origin === window.location.origin
        && link.pathname !== window.location.pathname) clearTimeout(timer);
  };
  if (window.__batchscopePresentKeys) window.__batchscopePresentKeys(false);
  doc.addEventListener("keydown", onKey);
  doc.addEventListener("click", onLeave, true);
  window.addEventListener("resize", onResize);
  report();
  const stop = (forget = true) => {
    doc.removeEventListener("keydown", onKey);
    doc.removeEventListener("click", onLeave, true);
    window.removeEventListener("resize", onResize);
    clearTimeout(timer);
    if (window.__batchscopePresentKeys === stop) window.__batchscopePresentKeys = null;
    if (forget) window.__batchscopeViewport = null;  // unmounted: the page forgets the size, say it again on return
  };
  window.__batchscopePresentKeys = stop;
  return stop;
}
"""

_component = st.components.v2.component("batchscope.present_keys", js=JS, isolate_styles=False)


Quiet = tuple[int, int | None, int, int | None]  # least and most window width, then height (None: no most)


def present_keys(next_button: str, previous_button: str, key: str, quiet: Quiet | None = None
                 ) -> tuple[int, int] | None:
    """Bind the keys to the buttons with these widget keys; returns the window's (width, height) once the
    browser has reported it (None before, and in tests without a browser).

    `quiet`: the window sizes the page draws exactly as it does with None. While the window stays in them
    its size is not said: saying it reruns the whole page on first load (a second script run and redraw,
    a second of a Run page's load on a busy 2-core machine) to draw the same thing again.
    """
    result = _component(key=key, data={"next": list(NEXT_KEYS), "previous": list(PREVIOUS_KEYS),
                                       "next_button": next_button, "previous_button": previous_button,
                                       "quiet": list(quiet) if quiet else None},
                        default={"viewport": None}, on_viewport_change=lambda: None, height=0)
    found = getattr(result, "viewport", None)
    return (int(found[0]), int(found[1])) if isinstance(found, list | tuple) and len(found) == 2 else None


def window_width(key: str) -> int | None:
    """The browser window's width once it has said it (None before, and in tests without a browser), for a page
    whose chart panels share the width (`charts.layout.panel_width`); `key` is the page's own."""
    # no buttons: it only reports the window's size, and only one that would change the panels' width
    found = present_keys("", "", key=key, quiet=(0, WIDEST_DEFAULT_WINDOW, 0, None))
    return found[0] if found else None
