"""Entry point of the peer comparison, ``python bench/run.py`` (bench/compare/run.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare.run import main

if __name__ == "__main__":
    sys.exit(main())
