"""The capstone's problems, one module each: ``review(size, progress) -> list[Row]``.

Each module also sets ``PLAN_S`` (seconds it expects to take per size, for
the progress bar's ETA) and ``TICKS`` (rounds it ticks per size).  A review
that cannot run here raises :class:`~capstone.reviews.common.Skipped` with
its reason.
"""

from . import hf, lowrank, mamba, nbody, scan, topk

PROBLEMS = {"scan": scan, "mamba": mamba, "topk": topk, "nbody": nbody}
"""The chapter's problems (and the scans they build on), in the order they run by default."""

EXTRA = {"lowrank": lowrank, "hf": hf}
"""Primitives the published comparisons also cover, and a whole model on the case studies'
kernels (transformers' Mamba): run with ``--only`` or ``--figures``."""

ALL = {**PROBLEMS, **EXTRA}
