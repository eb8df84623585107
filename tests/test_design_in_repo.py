"""The design is read inside the project: no tracked file cites a design document the repository does not
hold, every "docs/design.md §N" names a section docs/design.md has, and docs/architecture.md links it."""
from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
THIS = Path(__file__).resolve()

# the old shorthand for the brief kept outside the repository: "DESIGN §2", "DESIGN:", "see DESIGN"
# (the upper-case word on its own, not part of a name such as DESIGN_METRICS)
OUTSIDE_SHORTHAND = re.compile(r"(?<![\w/.-])DESIGN(?![\w.])")
# a file name that says it is a design document: design.md, DESIGN.md, ../shared/Design-notes.md
DESIGN_PATH = re.compile(r"[\w./~-]*design[\w-]*\.(?:md|rst|txt|pdf|html)", re.IGNORECASE)
SECTION_REF = re.compile(r"design\.md\)?,?\s*§\s*(\d+)", re.IGNORECASE)
HEADING = re.compile(r"^## (\d+)\. ", re.MULTILINE)


@functools.cache
def tracked_files() -> tuple[Path, ...]:
    """Every file git tracks (the scan must not pass because it read nothing)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = tuple(REPO / name for name in out.decode().split("\0") if name)
    assert files, "git ls-files listed nothing"
    return files


@functools.cache
def text_of(path: Path) -> str | None:
    """A tracked file's text; None for a binary file (Parquet, images) or one removed from the worktree."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def outside_references(path: Path, text: str) -> list[str]:
    """Each line of `text` (the file at `path`) that cites a design document outside the repository:
    the DESIGN shorthand, or a design file name that resolves, from the file's folder or the repository's
    root, to no file inside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}"
        if OUTSIDE_SHORTHAND.search(line):
            found.append(f"{where}: {line.strip()}")
            continue
        for name in DESIGN_PATH.findall(line):
            if name.startswith(("/", "~")):
                candidates = [Path(name).expanduser().resolve()]
            else:
                candidates = [(base / name).resolve() for base in (path.parent, REPO)]
            if not any(c.is_relative_to(REPO) and c.is_file() for c in candidates):
                found.append(f"{where}: {line.strip()}")
                break
    return found


def design_sections() -> set[int]:
    return {int(n) for n in HEADING.findall(DESIGN.read_text())}


def test_the_finder_flags_outside_design_references_and_passes_the_repositorys_own() -> None:
    path = REPO / "runners" / "example.py"
    flagged = ["(DESIGN §2)", "DESIGN: utilisation is sampled at 20 Hz", "see DESIGN.md",
               "the brief in /work/shared/DESIGN.md", "../shared/design.md", "docs/design-notes.md §1"]
    passed = ["(docs/design.md §2)", "DESIGN_METRICS = [", "designed for batches", "the design of the scheduler"]
    assert [len(outside_references(path, line)) for line in flagged] == [1] * len(flagged)
    assert [outside_references(path, line) for line in passed] == [[]] * len(passed)
    assert outside_references(REPO / "docs" / "architecture.md", "[design](design.md)") == []
    assert outside_references(REPO / "docs" / "architecture.md", "[design](../design.md)") != []


def test_no_tracked_file_cites_a_design_document_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is not None and path.resolve() != THIS:  # this file's examples are the finder's test data
            found += outside_references(path, text)
    assert found == []


def test_every_design_section_cited_exists() -> None:
    sections = design_sections()
    assert sections == set(range(1, max(sections) + 1)), f"docs/design.md sections {sorted(sections)} leave a gap"
    missing = []
    for path in tracked_files():
        text = text_of(path)
        if text is None or path.resolve() == THIS:
            continue
        refs = SECTION_REF.findall(text)
        if path == DESIGN:  # the page cites its own sections as "(§8)"
            refs += re.findall(r"§\s*(\d+)", text)
        missing += [f"{path.relative_to(REPO)}: §{n}" for n in refs if int(n) not in sections]
    assert missing == []


def test_architecture_links_the_design() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    assert re.search(r"\]\((?:\./)?design\.md(?:#[^)]*)?\)", text), "docs/architecture.md must link design.md"
    assert DESIGN.is_file()
