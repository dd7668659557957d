"""Compile ahead: the kernels a run calls, on every core, before anything is timed.

numba compiles each kernel on its first call, under one lock per process,
and caches it on disk.  A first run after install would compile for about a
minute on one core.  Instead, each problem's review runs once in a worker
process with nothing timed (:func:`capstone.measure.compile_only`: only the
optimized side is called, and baselines that are numba kernels), so the
kernels compile on all cores at once and the timed run loads them from the
cache: on 2 cores, a run with empty caches took 68 s instead of 93 s.
Meanwhile this process compiles what cannot be cached: pytreegrav's tree,
a numba jitclass.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, wait

from propopt.threads import usable_cpus

from .progress import Progress
from .reviews import ALL

#: Problems by their compile time on a fresh install, longest first, so that
#: the longest starts first.
ORDER = ("nbody", "topk", "mamba", "lowrank", "scan")

#: Seconds the step is planned at: pytreegrav's compilation, which every run
#: with the N-body problem pays, else loading the cached kernels.
PLAN_S = 25.0
PLAN_S_NO_PEERS = 5.0

#: Steps of the step's bar.
STEPS = 100


def _low_priority() -> None:
    """Worker initializer: the lowest priority, so that this process's own compilation,
    which every run pays, keeps its core."""
    if hasattr(os, "nice"):
        os.nice(19)


def _compile(name: str, size: str) -> float:
    """Run one review with nothing timed, on all of numba's threads; its seconds."""
    import numba

    import propopt as pp

    from .measure import compile_only

    t0 = time.perf_counter()
    # every parallel path, whatever the load right now
    with compile_only(), pp.set_num_threads(int(numba.config.NUMBA_NUM_THREADS)):
        ALL[name].review(size, Progress(1.0, stream=io.StringIO()))
    return time.perf_counter() - t0


def compile_ahead(problems: Sequence[str], sizes: Sequence[str], progress: Progress) -> None:
    """Compile what ``problems`` at ``sizes`` will call, in worker processes, and the peers'
    uncacheable kernels here."""
    tasks = [(n, s) for n in sorted(problems, key=_rank) for s in sizes]
    peers = [f for n in problems if (f := getattr(ALL[n], "compile_peers", None)) is not None]
    jobs = max(1, min(len(tasks), usable_cpus()))
    # The bar moves by the clock, against the plan (to 95% at most), and by each
    # finished task: nothing else reports from inside a compilation.
    plan = plan_seconds(problems)
    progress.start(f"compiling ahead in {jobs} processes", plan, STEPS)
    lock = threading.Lock()
    events = len(tasks) + len(peers)
    done = [0]
    t0 = time.perf_counter()

    def tick(_: object = None) -> None:
        with lock:
            done[0] += 1
            progress.advance_to(STEPS * done[0] // events)

    stop = threading.Event()

    def clock() -> None:
        while not stop.wait(1.0):
            with lock:
                elapsed = time.perf_counter() - t0
                progress.advance_to(min(STEPS * 95 // 100, int(STEPS * elapsed / plan)))

    ticker = threading.Thread(target=clock, daemon=True)
    ticker.start()

    context = multiprocessing.get_context("spawn")  # no fork of torch's and numba's threads
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_low_priority) as pool:
        # workers compile silently (the timed run announces anything left): they start,
        # and read the variable, at the submits
        saved = os.environ.get("PROPOPT_COMPILE_NOTICE")
        os.environ["PROPOPT_COMPILE_NOTICE"] = "0"
        try:
            futures = [pool.submit(_compile, n, s) for n, s in tasks]
        finally:
            if saved is None:
                del os.environ["PROPOPT_COMPILE_NOTICE"]
            else:
                os.environ["PROPOPT_COMPILE_NOTICE"] = saved
        for f in futures:
            f.add_done_callback(tick)  # the bar moves while this process compiles
        for compile_peer in peers:
            with lock:
                progress.note("and here the peers' kernels numba cannot cache")
            compile_peer()
            tick()
        wait(futures)  # a review that failed here fails again in the timed run, which reports it
    stop.set()
    ticker.join()
    progress.finish()


def plan_seconds(problems: Sequence[str]) -> float:
    """Seconds the step is planned at for ``problems``."""
    peers = any(hasattr(ALL[n], "compile_peers") for n in problems)
    return PLAN_S if peers else PLAN_S_NO_PEERS


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)
