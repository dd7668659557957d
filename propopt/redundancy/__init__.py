"""Redundancy: most of a stream does not matter, so keep a small summary of it.

Verbs
-----
MisraGries
    Approximate heavy hitters by frequency with ``m`` counters: every count
    is underestimated by at most ``n / (m + 1)`` after ``n`` items, and two
    summaries merge with the same guarantee for the combined stream.
"""

from .heavy_hitters import MisraGries, merge_counts, merge_summaries

__all__ = ["MisraGries", "merge_counts", "merge_summaries"]
