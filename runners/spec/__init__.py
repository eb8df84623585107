"""The sweep spec, torch-free: what the runner, the CLI and the New sweep form all validate against.

Layout: `options` says how an option is declared (label, help, limits, choices, modes) and checked;
`sweep` declares every option (SweepSpec, listed by spec_fields) and the request lengths; `slo` is the
latency SLO the runner and the app share; `static`, `continuous`, `endpoint` and `parallel` check their
options and plan their points; `modes` says which points a spec plans; `validate` turns a raw dict into
a SweepSpec or a problem per field.
"""
from runners.spec.modes import MODES, Point, point_count, points
from runners.spec.options import SpecError, parse_batch_sizes
from runners.spec.sweep import DTYPES, ENGINES, SweepSpec, model_context
from runners.spec.validate import problems, validate

__all__ = ["DTYPES", "ENGINES", "MODES", "Point", "SpecError", "SweepSpec", "model_context", "parse_batch_sizes",
           "point_count", "points", "problems", "validate"]
