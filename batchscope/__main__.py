"""Entry point for `python -m batchscope`."""
import sys

from batchscope.cli import main

sys.exit(main())
