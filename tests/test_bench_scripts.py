"""The bench scripts are run by hand, weeks apart, so nothing else notices when a change in the project takes away
a name one of them imports (console_session.py imported a pattern from a test module after the test dropped it).
Every name a script imports from this project still exists where the script looks for it."""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("runners", "batchscope", "app_pages", "tests")
SCRIPTS = sorted((REPO / "bench").glob("*.py"))


def project_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every `from ours import name` and (module, None) for every `import ours...`, anywhere in
    the script."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OURS:
                found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] in OURS]
    return found


def test_the_scan_sees_both_import_forms(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import json\nimport runners.spec\nfrom tests.x import A, B\nfrom pathlib import Path\n")
    assert project_imports(script) == [("runners.spec", None), ("tests.x", "A"), ("tests.x", "B")]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_name_a_bench_script_imports_from_the_project_exists(script: Path) -> None:
    missing = []
    for module_name, name in project_imports(script):
        module = importlib.import_module(module_name)
        if name is not None and not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"{script.name} imports what the project no longer has: {missing}"


def test_interval_from_run_reads_a_shipped_static_run_point_by_point() -> None:
    # the script builds the runner's own interval from a run folder; a change in that call's arguments broke it
    # once (the steps moved into each draw) while every name it imports still existed
    done = subprocess.run([sys.executable, str(REPO / "bench" / "interval_from_run.py"),
                           str(REPO / "data" / "demo" / "h200-fast-8b-bf16-chat")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"batch {b}" for b in (1, 2, 4, 8, 16, 32, 64)]
    assert all("; model " in line and "; draws alone " in line for line in lines), lines
