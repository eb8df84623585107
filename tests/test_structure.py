"""The layout rules of runners/: every module imports on its own, no two modules import each other
(directly or round a circle), the modules the app imports stay torch-free, and every mode the spec
knows has a runner."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNNERS = REPO / "runners"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(RUNNERS.rglob("*.py")) if p.stem != "__main__"}


def imports(path: Path) -> set[str]:
    """The runners modules a file imports, anywhere in it: `from a.b import c` is a.b.c when that is a
    module, else a.b (a package's own __init__ does not count as imported by its submodules)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                      for alias in node.names}
    return {name for name in found if name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and modules importing themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_runners_module_imports_another_that_imports_it_back() -> None:
    assert cycles({name: imports(path) for name, path in MODULES.items()}) == []


IMPORT_EACH = """
import importlib, os, sys
import torch, transformers, pyarrow.parquet  # third-party only: every child imports runners fresh
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as err:
            print(f"{name}: {type(err).__name__}: {err}", flush=True)
            os._exit(1)
        os._exit(0)
    if os.waitpid(pid, 0)[1]:
        failed.append(name)
print("failed:", failed)
"""


def test_every_runners_module_imports_on_its_own() -> None:
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH, *MODULES], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip().endswith("failed: []"), done.stdout + done.stderr


def test_what_the_app_imports_from_runners_stays_torch_free() -> None:
    code = ("import sys, runners.results.contract, runners.spec, runners.spec.continuous, runners.engines.kv_layout, "
            "runners.engines.presets, runners.engines.quant_layout, runners.workload.distributions; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pyarrow', 'transformers')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_every_mode_the_spec_knows_has_a_runner() -> None:
    from runners.modes import MODES as RUNNERS_BY_MODE
    from runners.spec import MODES

    assert tuple(RUNNERS_BY_MODE) == MODES
