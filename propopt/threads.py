"""How many threads propopt's parallel kernels use, decided per call.

A parallel kernel splits its work among ``T`` threads and waits at a barrier
for the slowest.  On a machine where another process keeps a core busy, a
thread that shares that core is descheduled for whole time slices and every
barrier waits for it: measured on 2 cores beside one busy process, a scan
with 2 threads ran several times slower than with 1.  So each call of a
parallel verb sizes itself to the cores that are free *now*:

    threads = min(limit, numba's thread count, free cores / concurrent calls)

* ``limit`` is :func:`set_num_threads` (``None``: no limit of propopt's own);
* numba's thread count is ``numba.get_num_threads()`` in the calling thread
  (``NUMBA_NUM_THREADS``, or ``numba.set_num_threads``), so a cap set
  through numba holds as well;
* free cores are the usable CPUs (affinity mask and cgroup quota) minus the
  CPU time other processes used since the last estimate (``/proc/stat``
  minus this process's own CPU time, over at least :data:`WINDOW_S`).
  Processes at a lower priority (``nice``) count too: the scheduler gives
  us most of their core's time, but not at once, and every barrier pays that
  delay (measured beside two ``nice 19`` compilers: a 2^24 scan took 110 ms
  with 2 threads against 24 ms with 1);
* concurrent calls from several threads of this process share the free
  cores.

A fixed count (``set_num_threads(n)``) turns the load estimate off.  Where
``/proc/stat`` cannot be read (not Linux), all usable CPUs count as free.

Results do not depend on the thread count where the documentation calls
them exact (top-k, integer scans, Morton keys, the tree's field); floating
point sums that are regrouped per thread differ from one count to another by
rounding only.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numba
from llvmlite import ir
from numba.extending import intrinsic

#: Shortest window (seconds) over which other processes' CPU use is
#: averaged; ``/proc/stat`` counts in ticks of 10 ms, so a shorter window
#: would resolve the load of 2 cores in steps of a quarter core or worse.
WINDOW_S = 0.1

#: Busy cores of other processes are rounded up from this fraction: a
#: process that used 0.3 of a core in the window still stalls our barriers
#: whenever it runs, so it takes the core from us.  Below it (background
#: daemons, a terminal) the core counts as free.
BUSY_FRACTION = 0.25

_lock = threading.Lock()
_limit: int | None = None

#: How long (seconds) a count of this process's running threads is reused.
PEERS_TTL_S = 0.01

#: A thread of this process counts as busy when it is running at two
#: looks this far apart (seconds).
RECHECK_S = 0.0002


def _cpu_sample() -> tuple[float, float, float] | None:
    """(wall s, busy CPU s of every process, CPU s of this process), or None off Linux."""
    try:
        with open("/proc/stat", "rb") as f:
            head = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    user, nice, system, _, _, irq, softirq, steal = (int(v) for v in head[1:9])
    busy = user + nice + system + irq + softirq + steal
    return time.monotonic(), busy / _HZ, time.process_time()


def _others(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Cores other processes kept busy from sample ``a`` to sample ``b``."""
    dt = b[0] - a[0]
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / dt) if dt > 0 else 0.0


class _Load:
    """Other processes' CPU use, in cores, averaged over the last window."""

    def __init__(self) -> None:
        self.others = 0.0
        self.sample = _cpu_sample()

    def update(self) -> float:
        """Cores other processes kept busy over the last window (0 when unknown)."""
        if self.sample is None:
            return 0.0
        if time.monotonic() - self.sample[0] >= WINDOW_S:
            new = _cpu_sample()
            if new is not None:
                self.others = _others(self.sample, new)
                self.sample = new
        return self.others


class LoadMeter:
    """How busy other processes kept the machine while a block ran, in cores.

    >>> from propopt.threads import LoadMeter
    >>> with LoadMeter() as meter:
    ...     pass
    >>> meter.cores >= 0.0
    True

    ``cores`` is the CPU time other processes used in the block divided by
    its wall time (``nan`` where ``/proc/stat`` cannot be read).  Benchmarks
    use it to flag figures measured on a busy machine.
    """

    def __init__(self) -> None:
        self.cores = math.nan
        self._start: tuple[float, float, float] | None = None

    def __enter__(self) -> LoadMeter:
        self._start = _cpu_sample()
        return self

    def __exit__(self, *exc: Any) -> None:
        end = _cpu_sample()
        if self._start is not None and end is not None:
            self.cores = _others(self._start, end)


class _Peers:
    """Threads of this process, other than the caller and numba's pool, running right now.

    Another library's pool that spins after its work takes a core from a
    kernel started at that moment, so a thread running at two looks
    :data:`RECHECK_S` apart counts; one seen running once is usually
    finishing the call its caller just waited for (jax's, here).

    numba's own pool threads are not counted: a pool thread that still
    spins after the previous kernel takes the next one's work at once.
    Where numba's OpenMP layer shares its runtime with torch (torch
    imported first), torch's spinning threads are those same pool threads:
    counting them ran a 2^24 scan on one thread after every torch op
    (11.2-11.6 ms against 6.4-6.6 ms, 2 cores).

    Read from ``/proc/self/task/*/stat`` (about 3 us a thread), at most
    every :data:`PEERS_TTL_S`.
    """

    def __init__(self) -> None:
        self.when = -1.0
        self.count = 0
        self.pools: dict[int, frozenset[int]] = {}

    def update(self) -> int:
        now = time.monotonic()
        if now - self.when < PEERS_TTL_S:
            return self.count
        me = threading.get_native_id()
        pool = self.pools.get(me)
        if pool is None:
            # at the calling thread's first sizing, whether or not a thread runs now:
            # the probe's kernel then loads at a moment a caller can predict (a
            # warm-up), not inside whichever call first meets a running thread
            pool = self.pools[me] = _pool_threads()
        running = _running_threads(me) - pool
        if running:
            # a thread seen running once may be finishing the work its
            # caller just waited for; one that still runs a moment later
            # keeps running
            time.sleep(RECHECK_S)
            running &= _running_threads(me)
        self.when, self.count = now, len(running)
        return self.count


def _running_threads(me: int) -> set[int]:
    """Ids of this process's threads other than ``me`` that are running (state R)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return set()
    running = set()
    for t in tasks:
        tid = int(t)
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :][:1] == b"R":
            running.add(tid)
    return running


_gettid = numba.types.ExternalFunction("gettid", numba.types.int32())


@numba.njit(parallel=True, cache=True)
def _thread_ids(out):  # type: ignore[no-untyped-def]
    for i in numba.prange(out.shape[0]):
        out[i] = _gettid()


def _pool_threads() -> frozenset[int]:
    """Ids of the threads numba's pool runs a kernel on when called from this thread.

    One small kernel on every pool thread (about 16 ms the first time in a
    process, after numba's first parallel call); empty where ``gettid``
    cannot be linked (not glibc or musl).
    """
    import numpy as np

    most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    before = numba.get_num_threads()
    out = np.zeros(64 * most, dtype=np.int64)
    try:
        numba.set_num_threads(most)
        _thread_ids(out)
    except Exception:  # no gettid to link: count every running thread
        return frozenset()
    finally:
        numba.set_num_threads(before)
    return frozenset(int(t) for t in np.unique(out))


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


_load = _Load()
_peers = _Peers()
_cpus = usable_cpus()


def free_cores() -> int:
    """Whole cores neither other processes nor this process's other threads keep busy (>= 1)."""
    with _lock:
        others = _load.update()
        peers = _peers.update()
    busy = math.floor(others) + (1 if others % 1 >= BUSY_FRACTION else 0)
    return max(1, _cpus - busy - peers)


class _Setting:
    """What :func:`set_num_threads` returns: the change is already made; ``with`` undoes it."""

    def __init__(self, previous: int | None) -> None:
        self._previous = previous

    def __enter__(self) -> _Setting:
        return self

    def __exit__(self, *exc: Any) -> None:
        global _limit
        _limit = self._previous

    def __repr__(self) -> str:
        return f"set_num_threads({_limit!r})"


def set_num_threads(n: int | None) -> _Setting:
    """Set how many threads propopt's kernels may use; ``None`` sizes each call to the load.

    The change applies at once, to the whole process.  The return value is a
    context manager that restores the previous setting on exit, so both
    forms work::

        propopt.set_num_threads(1)              # from now on
        with propopt.set_num_threads(1):        # for this block only
            ...

    Parameters
    ----------
    n : int or None
        A fixed number of threads, from 1 to numba's thread count
        (``NUMBA_NUM_THREADS``, which numba reads once, at its first
        parallel call).  ``None`` (the default state) chooses per call:
        numba's thread count, or fewer when other processes keep cores
        busy (see the module notes).

    Notes
    -----
    ``numba.set_num_threads`` in the calling thread caps propopt too.
    ``OMP_NUM_THREADS`` and ``torch.set_num_threads`` size other libraries'
    pools and do not affect propopt (see docs/threads.md).
    """
    global _limit
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            from .arrays import shown

            raise TypeError(f"n={shown(n)}: must be an int >= 1 or None")
        n = int(n)
        most = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
        if not 1 <= n <= most:
            raise ValueError(
                f"n={n}: must be between 1 and {most}, the threads numba started with; set "
                "NUMBA_NUM_THREADS before the first parallel call to allow more"
            )
    previous = _limit
    _limit = n
    return _Setting(previous)


def get_num_threads() -> int:
    """Threads the next parallel call from this thread would use."""
    _launch()
    cap = int(numba.get_num_threads())
    if _limit is not None:
        return min(_limit, cap)
    return max(1, min(cap, free_cores()))


@contextmanager
def sized() -> Iterator[int]:
    """Run the enclosed kernels with :func:`get_num_threads` threads; yields that count.

    Re-entrant: a sized call inside another keeps the outer count.
    """
    if getattr(_local, "depth", 0):
        _local.depth += 1
        try:
            yield int(numba.get_num_threads())
        finally:
            _local.depth -= 1
        return
    _launch()
    before = int(numba.get_num_threads())
    n = before if _limit is None else min(_limit, before)
    if _limit is None and n > 1:
        n = max(1, min(n, free_cores()))
    _local.depth = 1
    if n != before:
        numba.set_num_threads(n)
    try:
        yield n
    finally:
        if n != before:
            numba.set_num_threads(before)
        _local.depth = 0


_local = threading.local()


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run torch's intra-op pool with ``n`` threads inside the block, then restore its count.

    ``None``: unchanged.  For code that mixes propopt's kernels with torch ops
    (GEMMs between kernels, a peer timed beside them), so that the two pools
    do not take more cores than the caller allows.
    """
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: Set for numba's OpenMP runtime when it is loaded, unless the user chose a
#: wait policy: its threads sleep as soon as a parallel region ends instead
#: of spinning for ~300,000 iterations.  Spinning threads take the cores of
#: other processes' threads (and of torch's, where torch shares this
#: runtime); on 2 cores beside two low-priority busy processes a torch loop
#: of small ops took 4.2-4.4 s with the default policy and 42-47 ms with
#: PASSIVE, and a 2^24 scan on an idle machine took 18.9 ms against 26.1.
POLITE_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}

_launched = False


def _launch() -> None:
    """Start numba's threading layer once, with :data:`POLITE_ENV` while it loads.

    OpenMP runtimes read their environment when they are loaded, so the
    variables are set around numba's launch and restored afterwards: they
    reach no other runtime loaded later and no child process.  Nothing is
    changed when the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``, or
    when numba's layer was already started (by other code in the process).
    """
    global _launched
    if _launched:
        return
    with _lock:
        if _launched:
            return
        from numba.np.ufunc import parallel

        env: dict[str, str] = {}
        user_chose = any(k in os.environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
        if not getattr(parallel, "_is_initialized", True) and not user_chose:
            env = {k: v for k, v in POLITE_ENV.items() if k not in os.environ}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        omp = _loaded_openmp()
        icv = omp.omp_get_max_threads() if omp is not None else None
        try:
            numba.get_num_threads()  # loads the layer (and its OpenMP runtime) now
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if omp is not None and omp.omp_get_max_threads() != icv:
                omp.omp_set_num_threads(icv)
        _launched = True


def _loaded_openmp() -> Any:
    """The GNU OpenMP runtime if another library (torch) has already loaded it, else ``None``.

    numba's OpenMP layer then shares that runtime, and starting the layer
    sets the calling thread's OpenMP thread count to numba's pool size,
    over the owner's choice: after ``torch.set_num_threads(1)``, torch's
    ops ran on 2 threads again, and a torch loop of small ops went from
    13 ms to 0.2-2 s on 2 cores.  :func:`_launch` puts the count back.
    """
    import ctypes

    noload = getattr(os, "RTLD_NOLOAD", None)  # POSIX only
    if noload is None:
        return None
    try:
        return ctypes.CDLL("libgomp.so.1", mode=noload)
    except OSError:
        return None


F = TypeVar("F", bound=Callable[..., Any])


def parallel(fn: F) -> F:
    """Decorate a function whose numba kernels run in parallel: each call runs under :func:`sized`.

    For code built on propopt that has parallel kernels of its own (the case
    studies do), so that they follow the same thread policy.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with sized():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------- serial kernels on threads


@intrinsic
def take(typingctx, counter):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """In numba code: ``counter[0] += 1`` as one atomic operation, returning the old value.

    The next work item of a kernel run by :func:`run_threads`.
    """
    if not (isinstance(counter, numba.types.Array) and counter.dtype == numba.types.int64):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        one = context.get_constant(numba.types.int64, 1)
        return builder.atomic_rmw("add", ary.data, one, "seq_cst")

    return numba.types.int64(counter), codegen


def _int64_slot(context, builder, sig, args):  # type: ignore[no-untyped-def]
    """A pointer to ``flags[i]`` of an int64 array ``flags`` (numba codegen)."""
    ary = context.make_array(sig.args[0])(context, builder, args[0])
    return builder.gep(ary.data, [args[1]])


@intrinsic
def publish(typingctx, flags, i):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """In numba code: ``flags[i] = 1`` as an atomic store with release order, so that
    a thread that sees it (:func:`wait_for`) sees every write made before it."""
    if not (isinstance(flags, numba.types.Array) and flags.dtype == numba.types.int64):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        ptr = _int64_slot(context, builder, sig, args)
        builder.store_atomic(context.get_constant(numba.types.int64, 1), ptr, "release", 8)
        return context.get_dummy_value()

    return numba.types.void(flags, numba.types.intp), codegen


@intrinsic
def _published(typingctx, flags, i):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """``flags[i]`` read as an atomic load with acquire order."""
    if not (isinstance(flags, numba.types.Array) and flags.dtype == numba.types.int64):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        ptr = _int64_slot(context, builder, sig, args)
        return builder.load_atomic(ptr, "acquire", 8)

    return numba.types.int64(flags, numba.types.intp), codegen


@intrinsic
def _spin_pause(typingctx):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """A spin-wait hint: ``pause`` on x86-64, nothing elsewhere."""

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        import platform

        if platform.machine().lower() in ("x86_64", "amd64"):
            fnty = ir.FunctionType(ir.VoidType(), [])
            fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=fnty)
            builder.call(fn, [])
        return context.get_dummy_value()

    return numba.types.void(), codegen


@numba.njit(inline="always")
def wait_for(flags, i):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """In numba code: spin until ``flags[i]`` is published (:func:`publish`).

    For kernels whose threads take ordered work items (:func:`take`) that
    depend only on items taken before them: the thread that took item ``i``
    is running it, so the wait ends, and on one thread no wait happens.
    """
    while _published(flags, i) == 0:
        _spin_pause()


_workers: Any = None  # a ThreadPoolExecutor, made on first use
_workers_size = 0


def workers(n: int) -> Any:
    """A pool of at least ``n`` threads, one for the whole process, for GIL-free kernels.

    Made on first use and grown when a caller needs more threads.
    """
    global _workers, _workers_size
    with _lock:
        if _workers is None or _workers_size < n:
            from concurrent.futures import ThreadPoolExecutor

            old = _workers
            _workers, _workers_size = ThreadPoolExecutor(n), n
            if old is not None:
                old.shutdown(wait=False)
        return _workers


def run_threads(kernel: Callable[..., Any], nthreads: int, *args: Any) -> None:
    """``kernel(counter, *args)`` on ``nthreads`` threads, the caller's included, one counter.

    ``kernel`` is a serial numba kernel compiled with ``nogil=True`` that takes
    its work items with :func:`take` until none is left, so threads calling it
    together split the items dynamically.  This replaces a ``prange`` loop where
    first-call compilation matters: numba compiles a parallel loop's body a
    second time, inside its scheduler (the Mamba lane kernel compiled in
    12.6 s with ``prange`` and 4.1 s serial; the FMM's solve in 7.0 and 3.5 s).

    It suits kernels of tens of milliseconds or more.  Its threads are not
    numba's OpenMP threads, which torch shares and which spin after each op:
    a 2 ms kernel (the Mamba forward) ran 1.6-1.9x slower this way in a
    process using torch.
    """
    import numpy as np

    counter = np.zeros(1, np.int64)
    if nthreads <= 1:
        kernel(counter, *args)
        return
    pool = workers(nthreads - 1)
    futures = [pool.submit(kernel, counter, *args) for _ in range(nthreads - 1)]
    try:
        kernel(counter, *args)
    finally:
        for f in futures:
            f.result()
