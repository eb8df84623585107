"""Shared test set-up: the gpu marker skips without CUDA; on a runner-only host (a GPU image without the
app's packages) the app-side test modules are not collected, so `python3 -m pytest -m gpu` runs there.
The session fixtures below are what many modules read and none changes, made once per test process."""
from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from batchscope.store import Store

APP_ONLY = ("duckdb", "streamlit", "kneed")  # what a runner-only host lacks (README: headless sweeps)
APP_PACKAGES = ("batchscope", "app_pages", "app")  # ours, importable there but needing the above
TESTS = Path(__file__).parent
pytest_plugins = ["tests.recompile_guard"]


def _missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


def _top_level_imports(path: Path, seen: set[Path]) -> set[str]:
    """Root names a module imports at import time, following the tests package's own helper modules."""
    roots: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            helper = TESTS / f"{name.split('.')[-1]}.py"
            if name.startswith("tests.") and helper.exists() and helper not in seen:
                seen.add(helper)
                roots |= _top_level_imports(helper, seen)
            roots.add(name.split(".")[0])
    return roots


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """On a host without the app's packages, skip collecting the test modules that import them."""
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if not any(_missing(name) for name in APP_ONLY):
        return None
    imports = _top_level_imports(collection_path, set())
    return True if any(name in APP_PACKAGES or _missing(name) for name in imports) else None


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


PHASES = {"all": None, "shared": False, "alone": True}  # --phase -> whether its tests carry the `alone` marker


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--phase", choices=tuple(PHASES), default="all",
                     help="shared: every test but those marked `alone` (they time against a bound or read a "
                          "cliff that a neighbour on the same cores moves), for parallel workers; alone: only "
                          "those, run after with no neighbour (test.sh runs both); all (default): every test")


def _alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = PHASES[config.getoption("phase")]
    if wanted is not None:
        deselected = [item for item in items if _alone(item) != wanted]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if _alone(item) == wanted]
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _main_module_kept() -> Iterator[None]:
    """Streamlit's AppTest leaves the app script it ran as `sys.modules["__main__"]`; a later test that
    spawns processes (torch.multiprocessing) would then make every child run app.py on start. Each test
    gets the interpreter's own __main__ back."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _gpu_cache_handed_back(request: pytest.FixtureRequest) -> None:
    """An in-process engine's KV pool stays in torch's cache after its test; a later test that starts a server
    process on the same GPU would find it full (a served sweep after the continuous and paged tests did). Each GPU
    test starts with what earlier tests freed handed back to the driver, as a user's GPU would be."""
    if request.node.get_closest_marker("gpu") is None or not _cuda_available():
        return
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished run folder: tiny model on the CPU, three batch sizes. Tests read it or copy it; none
    writes into it."""
    from tests.runner_helpers import finished_tiny_run

    return finished_tiny_run(tmp_path_factory.mktemp("made-elsewhere") / "tiny-cpu", "1,2,4", repeats=2)


@pytest.fixture(scope="session")
def int8_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished run folder with int8 weights: tiny model, fast engine, on the CPU, batches 1 and 4.
    Tests read it; none writes into it."""
    from tests.runner_helpers import run_runner

    out = tmp_path_factory.mktemp("made-elsewhere") / "int8-cpu"
    done = run_runner(out, "--model", "tiny", "--engine", "fast", "--dtype", "int8", "--device", "cpu",
                      "--batch-sizes", "1,4", "--prompt-len", "fixed:16", "--output-len", "fixed:6", "--repeats", "1",
                      "--warmup", "0")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def demo_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed history DB file into which the shipped demo runs (data/demo) were imported as the app's
    first start imports them (5 s each time); a test that needs such a history copies it. Imported here,
    not at the top, so a runner-only host without the app's packages can still load this file."""
    from batchscope.demo import import_demo_runs
    from batchscope.store import Store

    db = tmp_path_factory.mktemp("demo") / "history.duckdb"
    with Store(db) as store:
        import_demo_runs(store, TESTS.parent / "data" / "demo")
    return db


@pytest.fixture(scope="session")
def demo_store(demo_history: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A history DB holding the shipped demo runs, which the tests only read."""
    from batchscope.store import Store

    db = tmp_path_factory.mktemp("demo-store") / "history.duckdb"
    shutil.copyfile(demo_history, db)
    store = Store(db)
    yield store
    store.close()
