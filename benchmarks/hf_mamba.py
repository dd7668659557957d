"""transformers' Mamba-130m and Mamba2-130m on CPU, with and without propopt's kernels.

``python -m benchmarks.hf_mamba`` (``--quick``: 2 layers, 256 tokens, 16 new
tokens, one round: checks that everything runs).  Models are built from the
130m configs with random weights (nothing is downloaded).  In one process,
the sides alternating call by call in each round:

* prefill, batch 1, ``--L`` tokens (2048), ``use_cache=False``, tokens/s:
  transformers' default CPU path; its mambapy path (``use_mambapy``,
  Mamba-1, when mambapy is installed); ``propopt_case_studies.mamba.hf.accelerate``;
  and the floor: transformers' path with the scan and the conv replaced by
  no-ops that return zeros (what the rest of the model costs, the ceiling
  of any speedup of the layer's sequence work);
* decode, batch 1: ``generate`` of ``--new`` greedy tokens (128) after a
  16-token prompt, tokens/s over the tokens after the first (the time of
  ``generate`` of one token subtracted); the same sides (the floor with the
  state update and the conv update as no-ops), and the weight-read floor:
  the model's parameter bytes over the copy bandwidth measured in this run
  (every decoded token reads every weight once);
* for Mamba-1's prefill also "propopt, last-token logits": the accelerated
  model called with ``logits_to_keep=1``, the work llama.cpp does;
* llama.cpp as a peer, when llama-cpp-python is installed and ``--gguf``
  names a GGUF of the same Mamba-1 model; otherwise a line says why it was
  skipped.  On the threads torch uses: prefill tokens/s at ``--L`` tokens
  (last-token logits, the same token ids), decode tokens/s over ``--new``
  greedy tokens after the same 16-token prompt (tokens 2..new), and the
  largest difference between llama.cpp's logits and transformers' on that
  prompt, next to transformers' float32 against the model in float64 (the
  two are alike when it is the same model, a few 1e-3 at 130m).
  ``--passive`` (below) applies to llama.cpp's OpenMP threads too.

The GGUF is made in three steps: save the benchmark's seeded Mamba-1 model
(``--quick`` saves the 2-layer one), convert it with llama.cpp's
``convert_hf_to_gguf.py`` (``$LLAMA`` below: a llama.cpp checkout, or
``vendor/llama.cpp`` in the llama-cpp-python sdist, ``pip download
--no-binary :all: --no-deps llama-cpp-python``; with no tokenizer files it
writes llama.cpp's built-in GPT-NeoX vocabulary, Mamba-130m's), and pass it
with ``--gguf``::

    python -m benchmarks.hf_mamba --save-hf /tmp/m130
    PYTHONPATH=$LLAMA/gguf-py python $LLAMA/convert_hf_to_gguf.py /tmp/m130 --outtype f32 \\
        --outfile /tmp/m130.gguf
    python -m benchmarks.hf_mamba --models mamba --gguf /tmp/m130.gguf

Timings are medians over ``--rounds`` (3); the load average of the machine
is printed before and after, since other processes change every figure.
OpenMP's wait policy is left as the environment has it (what a user's
script gets: by default, threads spin a while after each parallel region).
``--passive`` sets ``OMP_WAIT_POLICY=PASSIVE`` for every side (torch,
numba, llama.cpp) before they load: steadier on a shared machine (there two
identical runs of transformers' decode differed 5x under the default
policy), but every parallel region then wakes sleeping threads, which costs
a one-token decode of about a hundred regions 30-40% (27 against 38 ms a
token, quiet, 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np

MAMBA_130M = dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24,
                  expand=2, conv_kernel=4)  # fmt: skip
MAMBA2_130M = dict(vocab_size=50280, hidden_size=768, state_size=128, num_hidden_layers=24,
                   expand=2, head_dim=64, num_heads=24, n_groups=1, chunk_size=256)  # fmt: skip
QUICK = dict(num_hidden_layers=2, vocab_size=1000)
PROMPT = 16


def build(which: str, quick: bool) -> Any:
    import torch
    from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM

    cfg = dict(MAMBA_130M if which == "mamba" else MAMBA2_130M)
    if quick:
        cfg.update(QUICK)
    torch.manual_seed(0)
    if which == "mamba":
        return MambaForCausalLM(MambaConfig(**cfg)).eval()
    return Mamba2ForCausalLM(Mamba2Config(**cfg)).eval()


def token_ids(vocab_size: int, n: int) -> Any:
    """The ``(1, n)`` token ids (seeded): the prefill input; its first 16 are the prompt."""
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab_size, (1, n), generator=g)


# ------------------------------------------------------------------ sides
@contextlib.contextmanager
def transformers_path(model: Any) -> Iterator[None]:
    yield


@contextlib.contextmanager
def mambapy_path(model: Any) -> Iterator[None]:
    mixers = [layer.mixer for layer in model.backbone.layers]
    for m in mixers:
        m.use_mambapy = True
    try:
        yield
    finally:
        for m in mixers:
            m.use_mambapy = False


@contextlib.contextmanager
def propopt_path(model: Any) -> Iterator[None]:
    from propopt_case_studies.mamba.hf import accelerate, restore

    accelerate(model)
    try:
        yield
    finally:
        restore(model)


@contextlib.contextmanager
def propopt_last_logits(model: Any) -> Iterator[None]:
    """propopt's path, the model called with ``logits_to_keep=1`` (the last token's logits only)."""
    with propopt_path(model):
        model.forward = functools.partial(type(model).forward, model, logits_to_keep=1)
        try:
            yield
        finally:
            del model.forward


def _zeros_scan(hidden_states: Any, dt: Any, A: Any, B: Any, C: Any, *a: Any, **kw: Any) -> Any:
    """Mamba-1's scan as a no-op: zeros, and a zero state if asked."""
    import torch

    y = torch.zeros_like(hidden_states)
    if kw.get("return_last_state"):
        return y, hidden_states.new_zeros(hidden_states.shape[0], A.shape[0], A.shape[1])
    return y


def _zeros_ssd(hidden_states: Any, dt: Any, A: Any, B: Any, C: Any, *a: Any, **kw: Any) -> Any:
    """Mamba-2's chunk scan as a no-op."""
    import torch

    y = torch.zeros_like(hidden_states, dtype=torch.float32)
    if kw.get("return_final_states"):
        nb, _, H, P = hidden_states.shape
        return y, y.new_zeros(nb, H, P, B.shape[-1])
    return y


def _zeros_update(state: Any, hidden_states: Any, *a: Any, **kw: Any) -> Any:
    import torch

    return torch.zeros_like(hidden_states)


@contextlib.contextmanager
def noop_floor(model: Any) -> Iterator[None]:
    """transformers' path with the scan, the state update and both convs as no-ops.

    Patches the module-level functions that the mixers look up at call time
    (as the probes do), for the duration of the block.
    """
    from transformers.models.mamba import modeling_mamba as m1
    from transformers.models.mamba2 import modeling_mamba2 as m2

    if "Mamba2" in type(model).__name__:
        mod, new = m2, {"mamba2_chunk_scan": _zeros_ssd,
                        "mamba2_selective_state_update": _zeros_update}  # fmt: skip
    else:
        mod, new = m1, {"mamba_selective_scan": _zeros_scan,
                        "mamba_selective_state_update": _zeros_update}  # fmt: skip
    new["causal_conv1d_fn"] = lambda x, w, b=None, activation=None, **kw: x
    new["causal_conv1d_update"] = lambda x, state, w, b=None, activation=None, **kw: x
    with mock.patch.multiple(mod, **new):  # put back on exit, even after an error
        yield


# ------------------------------------------------------------------ timing
Timer = Callable[[], float]


def alternating(model: Any, sides: dict[str, Callable[[Any], Any]], fn: Timer,
                warm: Callable[[], Any], rounds: int,
                others: dict[str, Timer] | None = None) -> dict[str, float]:  # fmt: skip
    """Median seconds of each side, the sides in turn in every round.

    ``fn()`` returns the seconds of one measurement, run under each of
    ``sides`` (context managers on ``model``); ``others`` are sides that time
    themselves (llama.cpp), run in the same rounds.
    """
    others = others or {}
    for side in sides.values():
        with side(model):
            warm()
    for own in others.values():
        own()
    times: dict[str, list[float]] = {k: [] for k in [*sides, *others]}
    for _ in range(rounds):
        for name, side in sides.items():
            with side(model):
                times[name].append(fn())
        for name, own in others.items():
            times[name].append(own())
    return {k: float(np.median(v)) for k, v in times.items()}


def timed(fn: Callable[[], Any]) -> Callable[[], float]:
    """``fn`` as a function returning its seconds."""

    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run


def bandwidths(mbytes: int) -> tuple[float, float]:
    """Bytes read per second by a torch copy and by a torch sum of ``mbytes`` MiB (best of 5).

    The copy also writes what it reads; a GEMV, like the sum, only reads.
    """
    import torch

    a = torch.ones(mbytes * 2**18)
    b = torch.empty_like(a)
    best = [float("inf")] * 2
    for _ in range(5):
        for i, op in enumerate((lambda: b.copy_(a), a.sum)):
            t0 = time.perf_counter()
            op()
            best[i] = min(best[i], time.perf_counter() - t0)
    n = a.numel() * a.element_size()
    return n / best[0], n / best[1]


def param_bytes(model: Any) -> int:
    """Bytes of the model's parameters, tied ones once."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def sides_for(which: str) -> dict[str, Callable[[Any], Any]]:
    from transformers.utils.import_utils import is_mambapy_available

    sides: dict[str, Callable[[Any], Any]] = {"transformers": transformers_path}
    if which == "mamba":
        if is_mambapy_available():
            sides["transformers mambapy"] = mambapy_path
        else:
            print("  mambapy not installed: transformers' mambapy path skipped")
    sides["propopt"] = propopt_path
    sides["floor: no-op scan and conv"] = noop_floor
    return sides


def report(which: str, args: argparse.Namespace, bw: tuple[float, float],
           llama: LlamaCpp | None = None) -> None:  # fmt: skip
    """Print ``which``'s figures (``llama``: llama.cpp as one more side, Mamba-1 only)."""
    import torch

    model = build(which, args.quick)
    c = model.config
    print(f"{which}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, vocab {c.vocab_size}, "
          f"{param_bytes(model) / 2**20:.0f} MiB of float32 parameters")  # fmt: skip
    sides = sides_for(which)
    ids = token_ids(c.vocab_size, args.L)

    def prefill(n: int) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return model(ids[:, :n], use_cache=False).logits

        return run

    if "prefill" in args.what:
        psides = dict(sides)
        others = {}
        if which == "mamba":
            psides["propopt, last-token logits"] = propopt_last_logits
            if llama is not None:
                others["llama.cpp, last-token logits"] = llama.prefill
        t = alternating(model, psides, timed(prefill(args.L)), prefill(64), args.rounds, others)
        print(f"  prefill, batch 1, {args.L} tokens (median of {args.rounds} alternating rounds):")
        _lines(t, lambda s: args.L / s, "tok/s", t["propopt"])
        if others:
            ratio = t["llama.cpp, last-token logits"] / t["propopt, last-token logits"]
            print(f"    propopt, last-token logits: {ratio:.2f}x llama.cpp's tok/s")
    if "decode" not in args.what:
        return

    prompt = ids[:, :PROMPT]

    def gen(n: int) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)

        return run

    def decode() -> float:
        """Seconds of tokens 2..new: generate(new) less generate(1) (as llama.cpp's side)."""
        t0 = time.perf_counter()
        gen(1)()
        t1 = time.perf_counter()
        gen(args.new)()
        return time.perf_counter() - t1 - (t1 - t0)

    others = {"llama.cpp": llama.decode} if llama is not None and which == "mamba" else {}
    td = alternating(model, sides, decode, gen(2), args.rounds, others)
    n = args.new - 1
    print(f"  decode, batch 1, {args.new} greedy tokens after {PROMPT}, tokens 2..{args.new} "
          f"(median of {args.rounds} alternating rounds):")  # fmt: skip
    _lines(td, lambda s: n / s, "tok/s", td["propopt"])
    nbytes = param_bytes(model)
    for what, b in zip(("copy", "read-only"), bw):
        print(f"    {'floor: weight reads, ' + what:32s} {b / nbytes:9.1f} tok/s  "
              f"({nbytes / 2**20:.0f} MiB at {b / 2**30:.1f} GiB/s)")  # fmt: skip


def _lines(t: dict[str, float], rate: Callable[[float], float], unit: str, ours: float) -> None:
    for name, s in t.items():
        rel = "" if name == "propopt" else f"  propopt {s / ours:.2f}x this"
        print(f"    {name:32s} {rate(s):9.1f} {unit}  ({s:.3f} s){rel}")


class LlamaCpp:
    """llama.cpp running the GGUF ``--gguf`` of the benchmark's Mamba-1 model, as a side.

    :func:`llama_cpp` checks that it is the same model (its logits of the
    prompt against transformers') and returns one, or None with a line saying
    why.  Its prefill and decode run in :func:`report`'s alternating rounds,
    beside transformers' and propopt's, on the threads torch uses.
    """

    def __init__(self, llm: Any, toks: list[int], new: int) -> None:
        self.llm, self.toks, self.new = llm, toks, new

    def prefill(self) -> float:
        """Seconds of a prefill of every token (last-token logits only)."""
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(self.toks)
        return time.perf_counter() - t0

    def decode(self) -> float:
        """Seconds of tokens 2..new, greedy, after the prompt and the first token."""
        n, t0 = 0, 0.0
        self.llm.reset()
        for _ in self.llm.generate(self.toks[:PROMPT], top_k=1, temp=0.0, reset=True):
            n += 1
            if n == 1:
                t0 = time.perf_counter()
            if n == self.new:
                break
        return time.perf_counter() - t0


def llama_cpp(args: argparse.Namespace) -> LlamaCpp | None:
    """The llama.cpp side, after checking its logits against transformers'; None if skipped."""
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama.cpp: llama-cpp-python is not installed; peer skipped")
        return None
    if not args.gguf:
        print(
            "llama.cpp: llama-cpp-python is installed but no --gguf model was given; "
            "peer skipped (make one with --save-hf and llama.cpp's convert_hf_to_gguf.py)"
        )
        return None
    import torch

    threads = torch.get_num_threads()  # numba's too (printed at the start)
    model = build("mamba", args.quick)
    vocab = model.config.vocab_size
    ids = token_ids(vocab, args.L)
    toks = ids[0].tolist()

    # the same model? all PROMPT positions' logits, llama.cpp against transformers, and
    # transformers' float32 against the model in float64 (the size of float32 rounding here)
    check = Llama(model_path=args.gguf, n_threads=threads, n_threads_batch=threads,
                  n_ctx=256, n_batch=PROMPT, n_ubatch=PROMPT, logits_all=True,
                  verbose=False)  # fmt: skip
    if check.n_vocab() < vocab:
        print(f"llama.cpp: {args.gguf} has {check.n_vocab()} tokens, the model {vocab}; "
              "not this benchmark's model (see --save-hf); peer skipped")  # fmt: skip
        return None
    check.eval(toks[:PROMPT])
    theirs = np.asarray(check.scores[:PROMPT, :vocab], dtype=np.float64)
    with torch.no_grad():
        ref = model(ids[:, :PROMPT], use_cache=False).logits[0].double().numpy()
        ref64 = model.double()(ids[:, :PROMPT], use_cache=False).logits[0].numpy()
    diff, rounding = float(np.abs(theirs - ref).max()), float(np.abs(ref - ref64).max())
    print(f"llama.cpp ({args.gguf}, {threads} threads): logits of the {PROMPT}-token prompt, "
          f"max |llama.cpp - transformers| {diff:.1e}, |transformers - float64| {rounding:.1e} "
          f"(largest logit {np.abs(ref).max():.1f})"
          + ("" if diff < 10 * rounding + 1e-4 else "; NOT the same model"))  # fmt: skip
    del check, model
    llm = Llama(model_path=args.gguf, n_threads=threads, n_threads_batch=threads,
                n_ctx=max(4096, args.L + 256), n_batch=args.L, n_ubatch=args.L,
                verbose=False)  # fmt: skip
    return LlamaCpp(llm, toks, args.new)


def save_hf(directory: str, quick: bool) -> None:
    """Write the benchmark's Mamba-1 model (seeded) with ``save_pretrained``, for conversion."""
    model = build("mamba", quick)
    model.save_pretrained(directory)
    c = model.config
    print(
        f"saved mamba ({c.num_hidden_layers} layers, vocab {c.vocab_size}) to {directory}; "
        "convert it with llama.cpp's convert_hf_to_gguf.py (see this module's docstring)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, 256 tokens, 16 new, 1 round")
    ap.add_argument("--L", type=int, default=None, help="prefill tokens (2048)")
    ap.add_argument("--new", type=int, default=None, help="decoded tokens (128)")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (3)")
    ap.add_argument("--models", default="mamba,mamba2")
    ap.add_argument("--what", default="prefill,decode")
    ap.add_argument("--gguf", default=None, help="a GGUF of the same model, for llama.cpp")
    ap.add_argument("--passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for every side (default: as set)")  # fmt: skip
    ap.add_argument("--save-hf", default=None, metavar="DIR",
                    help="save the Mamba-1 model to DIR (to convert to GGUF), exit")  # fmt: skip
    args = ap.parse_args()
    if args.save_hf:
        save_hf(args.save_hf, args.quick)
        return
    args.L = args.L or (256 if args.quick else 2048)
    args.new = args.new or (16 if args.quick else 128)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch loads its OpenMP
    import numba
    import torch

    print(
        f"torch threads {torch.get_num_threads()}, numba threads {numba.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.1f} (other processes change every figure)"
    )
    bw = bandwidths(64 if args.quick else 512)
    policy = os.environ.get("OMP_WAIT_POLICY", "unset (the runtimes' default)")
    print(f"OMP_WAIT_POLICY {policy}; bandwidth read by a copy "
          f"{bw[0] / 2**30:.1f} GiB/s, by a sum {bw[1] / 2**30:.1f} GiB/s")  # fmt: skip
    models = args.models.split(",")
    llama = llama_cpp(args) if "mamba" in models else None
    for which in models:
        report(which, args, bw, llama)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
