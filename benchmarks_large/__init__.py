"""The heavy sizes of the asv suites, apart so that ``asv run --quick`` stays short.

Each class here is the suite of the same name in ``benchmarks/`` with its
large parameters only; run them with ``asv run --config asv.large.conf.json``.
"""

import sys
from pathlib import Path

# asv makes only the benchmark directory's own package importable; the
# suites extended here live beside it, in ``benchmarks``.
_root = str(Path(__file__).resolve().parents[1])
if _root not in sys.path:
    sys.path.append(_root)
