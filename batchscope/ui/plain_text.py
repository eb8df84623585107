"""Text that must show as written where Streamlit renders markdown (alerts, captions, headers).

Validation messages quote distributions (`uniform:1:100:`), runner errors quote code (`__init__`),
and run names are typed by users; markdown would turn `:100:` into an emoji and `*x*` into italics.
"""
from __future__ import annotations

import re

_PUNCTUATION = re.compile(r"([\\!\"#$%&'()*+,\-./:;<=>?@\[\]^_`{|}~])")


def plain(text: object) -> str:
    """`text` with every markdown punctuation character backslash-escaped (a CommonMark escape, shown as
    the character itself), so it renders literally."""
    return _PUNCTUATION.sub(r"\\\1", str(text))
