"""Time the outlier-step count (runners.metrics.outliers) over the steps each point of a run folder stored.

    python bench/outlier_steps.py RUN_FOLDER ...

A point's store stage counts its outlier steps while the GPU waits for the next point, so its cost is device
time: on the H200 a continuous point of 22 000 steps spent 17–32 s there ("stored in …" in log.txt) while the
count took the median of a step's group once for every step. Prints, per point, its steps, the count and the
seconds it took on this machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from runners.metrics.outliers import outlier_steps  # noqa: E402 - the repo root first, as `python bench/…` runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="run folders (each with a points/ folder)")
    print("| run | point | steps | outlier steps | seconds |\n|---|---|---|---|---|")
    for folder in parser.parse_args().folders:
        for path in sorted((folder / "points").glob("*.steps.parquet")):
            steps = pq.read_table(path).to_pylist()
            start = time.perf_counter()
            found = outlier_steps(steps)
            print(f"| `{folder.name}` | {path.name.split('.')[0]} | {len(steps)} | {found} | "
                  f"{time.perf_counter() - start:.3f} |")


if __name__ == "__main__":
    main()
