import sys

from runners.cli import main

sys.exit(main())
