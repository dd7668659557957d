"""The capstone's problems, one module each: ``review(size, progress) -> list[Row]``.

Each module also sets ``PLAN_S`` (seconds it expects to take per size, for
the progress bar's ETA) and ``TICKS`` (rounds it ticks per size).
"""

from . import mamba, nbody, scan, topk

PROBLEMS = {"scan": scan, "mamba": mamba, "topk": topk, "nbody": nbody}
"""Each problem's review module, in the order they run."""
