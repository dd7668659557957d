"""The thread policy: set_num_threads (also a context manager), sizing to free cores, politeness."""

import os
import subprocess
import sys
import textwrap
import threading

import numba
import numpy as np
import pytest

import propopt as pp
from propopt import threads


def test_set_num_threads_applies_at_once_and_restores_as_a_context():
    assert threads._limit is None
    with pp.set_num_threads(1):
        assert pp.get_num_threads() == 1
        with threads.sized() as n:
            assert n == 1 and numba.get_num_threads() == 1
    assert threads._limit is None
    setting = pp.set_num_threads(1)
    try:
        assert pp.get_num_threads() == 1 and "1" in repr(setting)
    finally:
        pp.set_num_threads(None)
    assert threads._limit is None


@pytest.mark.parametrize(
    ("n", "err", "match"),
    [
        (0, ValueError, r"n=0: must be between 1 and \d+"),
        (10**6, ValueError, "NUMBA_NUM_THREADS"),
        (1.5, TypeError, r"n=1\.5: must be an int >= 1 or None"),
        (True, TypeError, "n=True"),
    ],
)
def test_set_num_threads_rejects_bad_counts(n, err, match):
    with pytest.raises(err, match=match):
        pp.set_num_threads(n)
    assert threads._limit is None


def test_numba_thread_count_caps_propopt_and_is_restored():
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with threads.sized() as n:
            assert n == 1
        assert pp.get_num_threads() == 1
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)


def test_sized_is_reentrant_and_restores_numba_count():
    before = numba.get_num_threads()
    with pp.set_num_threads(1), threads.sized() as outer:
        with threads.sized() as inner:
            assert inner == outer == 1
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before


def test_load_from_other_processes_takes_cores(monkeypatch):
    # another process used 1.6 cores of CPU time over the window: one core is free
    monkeypatch.setattr(threads, "_cpus", 4)
    monkeypatch.setattr(threads._load, "update", lambda: 1.6)
    monkeypatch.setattr(threads._peers, "update", lambda: 0)
    assert threads.free_cores() == 2
    monkeypatch.setattr(threads._load, "update", lambda: 1.1)  # below BUSY_FRACTION
    assert threads.free_cores() == 3
    monkeypatch.setattr(threads._peers, "update", lambda: 5)  # this process's spinning pools
    assert threads.free_cores() == 1  # never fewer than one


def test_load_window_measures_a_busy_neighbour():
    # a child process spinning for a while shows as about one busy core
    load = threads._Load()
    if load.sample is None:
        pytest.skip("/proc/stat is not readable here")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<0.6: pass"]
    )
    try:
        import time

        time.sleep(0.35)
        load.sample = threads._cpu_sample()
        time.sleep(0.2)
        busy = load.update()
    finally:
        child.wait()
    assert 0.5 < busy < 2.5


def test_peers_counts_running_threads_of_this_process():
    peers = threads._Peers()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        import time

        seen = 0
        for _ in range(50):  # the spinner holds the GIL only part of the time
            peers.when = -1.0
            seen = max(seen, peers.update())
            time.sleep(0.002)
    finally:
        stop.set()
        t.join()
    assert seen >= 1


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, size=3_000_000).astype(np.int64)
    y = rng.normal(size=2_000_000).astype(np.float32)
    with pp.set_num_threads(1):
        s1, (v1, i1) = pp.associative_scan(pp.add, x), pp.topk(y, 100)
    with pp.set_num_threads(numba.config.NUMBA_NUM_THREADS):
        s2, (v2, i2) = pp.associative_scan(pp.add, x), pp.topk(y, 100)
    np.testing.assert_array_equal(s1, s2)  # integer scans are exact
    np.testing.assert_array_equal(i1, i2)  # top-k is exact, ties included
    np.testing.assert_array_equal(v1, v2)


def _run(code, env=None):
    full = dict(os.environ, PYTHONPATH=os.getcwd())
    full.pop("OMP_WAIT_POLICY", None)
    full.pop("GOMP_SPINCOUNT", None)
    full.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_numba_openmp_runtime_waits_politely_and_the_environment_is_restored():
    code = """
        import os, time, numpy as np, numba, propopt as pp
        x = np.ones(1 << 22, np.float32)
        with pp.set_num_threads(numba.config.NUMBA_NUM_THREADS):
            for _ in range(3):
                pp.associative_scan(pp.add, x)
        burnt = []
        for _ in range(3):
            with pp.set_num_threads(numba.config.NUMBA_NUM_THREADS):
                pp.associative_scan(pp.add, x)
            c = time.process_time(); time.sleep(0.05); burnt.append(time.process_time() - c)
        print(numba.threading_layer(), os.environ.get("OMP_WAIT_POLICY"), min(burnt))
    """
    layer, env, burnt = _run(code).split()
    assert env == "None"  # restored after numba's runtime was loaded
    if layer == "omp" and numba.config.NUMBA_NUM_THREADS > 1:
        # idle threads sleep: a spinning runtime burns ~10 ms of CPU here
        assert float(burnt) < 0.004


def test_a_users_wait_policy_is_left_alone():
    code = """
        import os, numpy as np, propopt as pp
        pp.associative_scan(pp.add, np.ones(10, np.float32))
        print(os.environ.get("OMP_WAIT_POLICY"))
    """
    assert _run(code, {"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"


def test_torch_thread_count_survives_propopt_in_either_order():
    # numba's OpenMP layer shares torch's runtime, and starting the layer
    # set the thread's OpenMP count to numba's pool size: torch's small ops
    # then ran on all cores again (a torch loop of 13 ms took 0.2-2 s)
    pytest.importorskip("torch")
    for imports in ("import propopt as pp\nimport torch", "import torch\nimport propopt as pp"):
        code = (
            imports
            + """
import ctypes, os, numpy as np
torch.set_num_threads(1)
torch.exp(torch.ones(1 << 20))
pp.topk(np.random.default_rng(0).normal(size=10**7).astype(np.float32), 1000)
omp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
print(omp.omp_get_max_threads(), torch.get_num_threads())
"""
        )
        assert _run(code) == "1 1", imports


def test_pool_threads_are_numbas_workers_of_this_process():
    pp.associative_scan(pp.add, np.ones(1 << 16, np.float32))  # starts numba's layer
    pool = threads._pool_threads()
    tasks = {int(t) for t in os.listdir("/proc/self/task")}
    assert pool <= tasks
    assert len(pool - {threading.get_native_id()}) >= numba.config.NUMBA_NUM_THREADS - 1


def test_peers_leave_out_numbas_pool_and_threads_that_stop(monkeypatch):
    """A pool thread still spinning after the last kernel is not a competitor, and a thread
    seen running once but not a moment later (finishing another library's call) is not either."""
    peers = threads._Peers()
    peers.pools[threading.get_native_id()] = frozenset({101, 102})
    looks = iter([{101, 102, 7, 8}, {101, 8}])
    monkeypatch.setattr(threads, "_running_threads", lambda me: next(looks))
    assert peers.update() == 1  # only 8 ran at both looks; 101 and 102 are the pool's


@numba.njit(nogil=True)
def _mark_items(counter, seen, n):  # type: ignore[no-untyped-def]
    while True:
        item = threads.take(counter)
        if item >= n:
            return
        seen[item] += 1


@pytest.mark.parametrize("nthreads", [1, 2, 4])
def test_run_threads_hands_each_item_to_exactly_one_thread(nthreads):
    n = 200_000
    seen = np.zeros(n, np.int64)
    threads.run_threads(_mark_items, nthreads, seen, n)
    assert (seen == 1).all()
