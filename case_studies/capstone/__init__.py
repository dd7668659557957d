"""The capstone chapter, measured here: each problem's tools beside their strongest fair peers.

``python -m propopt capstone`` (or ``python -m propopt_case_studies.capstone``) runs
:func:`run` and prints the review table.  A package of its own, above the
library and the case studies: it imports both, and nothing in ``propopt`` or
``propopt_case_studies`` imports it (``propopt``'s command line finds it through the
``propopt.commands`` entry point).

Modules: :mod:`.measure` (interleaved timing, shared with ``benchmarks/``),
:mod:`.machine` (the CPU and its roofs), :mod:`.peers` (peers written in
torch and numba from their published definitions), :mod:`.workloads`,
:mod:`.reviews` (one module per problem), :mod:`.rows` (the table),
:mod:`.figures` (the JSON every published figure comes from).
"""
