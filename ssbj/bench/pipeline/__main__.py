"""``python -m ssbj.bench.pipeline``."""

import sys

from ssbj.bench.pipeline.cli import main

sys.exit(main())
