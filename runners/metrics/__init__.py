"""What a sweep measures, as pure functions of the timed runs: a typed repeat in one shape for every
mode (`repeat`; built by `static`, `replicated` and `continuous`), one summary row that every mode
extends (`summary`), outlier steps, and utilisation from telemetry samples."""
