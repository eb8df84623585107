"""Markdown table of bench/transformers_serve.sh: per concurrency, output tok/s, TTFT P50/P95 and ITL P50 of
`transformers serve`, BatchScope served (`runners serve`) and BatchScope in-process, each server's throughput
as a share of in-process, the tokens a request really had (a chat template adds prompt tokens; a server that
refuses to force lengths stops where it chooses), and then how each side's requests were made: what the
server refused and what the endpoint engine negotiated (the run folders' env.json and log.txt).

Reads run folders with pyarrow only (the GPU host has no DuckDB). Usage: serve_table.py OUT_DIR
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from endpoint_table import cell, summaries  # bench/endpoint_table.py: point summaries by concurrency, one cell

SIDES = {"tserve": "transformers serve", "served": "BatchScope served", "inprocess": "BatchScope in-process"}
NEGOTIATION = re.compile(r"^\S+ (?:point \d+: )?(.*(?:refused|cannot be forced).*)$")


def share(row: dict | None, base: dict | None) -> str:
    """A side's output tok/s over in-process's at the same concurrency."""
    if row is None or base is None or row["status"] != "ok" or base["status"] != "ok":
        return "—"
    return f"{row['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}"


def lengths(row: dict | None) -> str:
    if row is None or row["status"] != "ok":
        return "—"
    return f"{row['prompt_len_mean']:.0f} / {row['output_len_mean']:.1f}"


def table(out: Path) -> list[str]:
    found = {side: summaries(out, side) for side in SIDES}
    lines = ["| concurrency | side | out tok/s | × in-process | TTFT P50 ms | TTFT P95 ms | ITL P50 ms "
             "| prompt / output tokens a request | failed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(set().union(*found.values())):
        base = found["inprocess"].get(c)
        for side, name in SIDES.items():
            row = found[side].get(c)
            lines.append(f"| {c} | {name} | {cell(row, 'output_tokens_per_s')} | {share(row, base)} | "
                         f"{cell(row, 'ttft_ms_p50')} | {cell(row, 'ttft_ms_p95')} | {cell(row, 'itl_ms_p50', 2)} | "
                         f"{lengths(row)} | {'—' if row is None else row['error'] or 'none'} |")
    return lines


def how(out: Path) -> list[str]:
    """Per side: the engine line of its first run folder's env.json (the server's labels and what was
    negotiated) and the distinct refusals its logs tell."""
    lines = []
    for side, name in SIDES.items():
        folders = sorted(p for p in out.glob(f"{side}-*") if (p / "env.json").is_file())
        if not folders:
            lines.append(f"- {name}: no run")
            continue
        env = json.loads((folders[0] / "env.json").read_text())
        told: list[str] = []
        for folder in folders:
            log = folder / "log.txt"
            for line in log.read_text().splitlines() if log.is_file() else []:
                match = NEGOTIATION.match(line)
                if match and match.group(1) not in told:
                    told.append(match.group(1))
        lines.append(f"- {name}: {env['engine']}" + "".join(f"\n  - {t}" for t in told))
    return lines


def header(out: Path) -> list[str]:
    """The model, device and versions the numbers come from."""
    spec = next((json.loads(p.read_text()) for p in sorted(out.glob("*-*/spec.json"))), {})
    env = next((json.loads(p.read_text()) for p in sorted(out.glob("inprocess-*/env.json"))), {})
    versions = out / "versions.json"
    packages = json.loads(versions.read_text()) if versions.is_file() else {}
    return [f"{spec.get('model', '?')} (random weights, seed {spec.get('seed', '?')}), {spec.get('dtype', '?')}, "
            f"{env.get('gpu') or env.get('device', '?')}; prompt {spec.get('prompt_len', '?')}, output "
            f"{spec.get('output_len', '?')}, closed loop; "
            + ", ".join(f"{name} {version}" for name, version in packages.items()), ""]


def main(out: Path) -> None:
    print("\n".join([*header(out), *table(out), "", "How the requests were made:", *how(out)]))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
