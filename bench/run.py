"""Entry point of the peer comparison, ``python bench/run.py`` (bench/compare/run.py);
``python bench/run.py --check [guard options]`` runs the regression guard instead
(bench/compare/guard.py) on the latest stored results."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        from bench.compare.guard import main as check

        sys.exit(check(sys.argv[2:]))
    from bench.compare.run import main

    sys.exit(main())
