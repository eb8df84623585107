import gc
import sys

from runners.cli import main

code = main()
# Every file of the run is written and closed by now. The interpreter's last collections would walk every object
# torch and transformers made, 0.7-0.9 s of CPU on each runner's exit (docs/benchmarks.md, issue 35); frozen, they
# are skipped, while atexit handlers, thread joins and stream flushes still run.
gc.freeze()
sys.exit(code)
