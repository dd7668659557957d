"""A whole model: Hugging Face transformers' Mamba-130m on CPU, with and without propopt's kernels.

:func:`propopt_case_studies.mamba.hf.accelerate` gives every mixer of a
``MambaForCausalLM`` propopt's forward (the conv and the selective scan fused
per layer in prefill; each block one numba call per decoded token).  The
review times the accelerated model against transformers' default CPU path on
the same weights, in interleaved rounds:

* prefill: batch 1, :data:`TOKENS` token ids, ``use_cache=False``, every
  position's logits;
* decode: ``generate`` of :data:`NEW` greedy tokens after a
  :data:`PROMPT`-token prompt, the whole call, reported per generated token.

The model is built from the Mamba-130m config with seeded random weights
(nothing is downloaded).  The floor of each row is transformers' path with
the scan, the state update and both convs replaced by no-ops that return
zeros (:func:`noop_floor`): what the rest of the model costs, timed in rounds
of its own against the accelerated model.  The error is against the model in
float64 (:func:`_exact`): every prefill logit, and for decode the logits
``generate`` chose each token from, against a float64 forward of the
generated sequence; the peer's cell gives transformers' own float32 error
against the same reference, as a multiple of propopt's.

Runs only with ``--only hf`` or ``--figures``; without transformers it is
skipped with its reason.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from ..measure import Comparison, best_torch_threads, compare, compiling_only, torch_threads
from ..progress import Progress
from ..rows import Row, row
from .common import Skipped, cpu_device, max_rel

MAMBA_130M = dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24,
                  expand=2, conv_kernel=4)  # fmt: skip
"""state-spaces/mamba-130m-hf's shape."""
MODEL = MAMBA_130M
"""The config the review builds (the tests shrink it)."""

TOKENS = {"small": 256, "default": 512, "large": 2048}
"""Prefill tokens per size.  transformers' path loops over the tokens in every
layer: 3-7 s per call at the default size on 2 cores, 13-26 s at 2048."""
NEW = {"small": 16, "default": 32, "large": 128}
"""Greedy tokens ``generate`` decodes per call."""
PROMPT = 16
ROUNDS = {"small": 3, "default": 3, "large": 3}
FLOOR_ROUNDS = {"small": 3, "default": 3, "large": 3}
PLAN_S = {"small": 40.0, "default": 90.0, "large": 300.0}
TICKS = {size: 2 * (r + FLOOR_ROUNDS[size]) for size, r in ROUNDS.items()}

PREFILL = (
    "a Python loop over tokens in every layer",
    "locality (one fused pass)",
    "accelerate(model): conv and selective scan fused per layer, in_proj split into "
    "contiguous GEMMs",
)
DECODE = (
    "some forty small torch ops per layer and token",
    "locality (one fused call per block)",
    "accelerate(model): each block (norm, in_proj, conv, scan step, out_proj) one numba call, "
    "matrix-vector rows split between threads",
)


def transformers_mamba() -> tuple[Any, Any]:
    """``(MambaConfig, MambaForCausalLM)``; :class:`Skipped` when transformers is missing."""
    try:
        from transformers import MambaConfig, MambaForCausalLM
    except ImportError as e:
        if getattr(e, "name", None) == "transformers":
            raise Skipped("transformers is not installed (pip install 'propopt[hf]')") from None
        raise Skipped(f"this transformers has no Mamba model ({e})") from None
    return MambaConfig, MambaForCausalLM


def build(config: dict[str, Any] | None = None) -> Any:
    """A ``MambaForCausalLM`` of ``config`` (default :data:`MODEL`), seeded random weights, eval."""
    import torch

    MambaConfig, MambaForCausalLM = transformers_mamba()
    torch.manual_seed(0)
    return MambaForCausalLM(MambaConfig(**(MODEL if config is None else config))).eval()


def accelerated_twin(model: Any) -> Any:
    """A copy of ``model`` sharing its parameters and buffers, accelerated.

    The modules are copied and the tensors are not, so the two sides read
    the same weights, and neither pays for switching paths between calls.
    """
    from propopt_case_studies.mamba.hf import accelerate

    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return accelerate(copy.deepcopy(model, shared))


def token_ids(vocab_size: int, n: int) -> Any:
    """The ``(1, n)`` token ids (seeded); the first :data:`PROMPT` are ``generate``'s prompt."""
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab_size, (1, n), generator=g)


def _zeros_scan(hidden_states: Any, dt: Any, A: Any, *a: Any, **kw: Any) -> Any:
    import torch

    y = torch.zeros_like(hidden_states)
    if kw.get("return_last_state"):
        return y, hidden_states.new_zeros(hidden_states.shape[0], A.shape[0], A.shape[1])
    return y


def _zeros_update(state: Any, hidden_states: Any, *a: Any, **kw: Any) -> Any:
    import torch

    return torch.zeros_like(hidden_states)


def _identity_conv(x: Any, *a: Any, **kw: Any) -> Any:
    return x


@contextlib.contextmanager
def noop_floor() -> Iterator[None]:
    """Inside the block transformers' Mamba layers scan, update the state and convolve with no-ops.

    The selective scan and the state update return zeros, both causal convs
    return their input: what is left of the model (the norms, the
    projections, the head) is the cost no change of the layer's sequence
    work can remove.  Patches the functions ``modeling_mamba`` looks up at
    call time, for the block only; an accelerated model does not call them.
    """
    from transformers.models.mamba import modeling_mamba as mod

    new = {
        "mamba_selective_scan": _zeros_scan,
        "mamba_selective_state_update": _zeros_update,
        "causal_conv1d_fn": _identity_conv,
        "causal_conv1d_update": _identity_conv,
    }
    with mock.patch.multiple(mod, **new):  # put back on exit, even after an error
        yield


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' logger at errors only (its notes on the missing CUDA kernels, generate's
    defaults) for the block."""
    from transformers.utils import logging

    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


def _name(config: dict[str, Any]) -> str:
    if config == MAMBA_130M:
        return "Hugging Face Mamba-130m on CPU"
    return (f"Hugging Face Mamba on CPU ({config['num_hidden_layers']} layers, "
            f"hidden {config['hidden_size']})")  # fmt: skip


def _at_best(fn: Callable[[], Any], probe: Callable[[], Any]) -> tuple[Callable[[], Any], int]:
    """``fn`` run at the torch thread count (1 or all usable cores) that runs ``probe`` faster,
    and that count.

    Both paths run torch operations (propopt's its GEMMs: ``in_proj``,
    ``out_proj``, the head), and torch's thread pool does not shrink when
    other processes take cores: on a busy machine one thread can be several
    times faster than all of them.  Each side runs at its own best count,
    chosen on ``probe``: the same call with an eighth of the prompt (prefill)
    or of the new tokens (decode), the same operations fewer times, so that
    the choice (the best of two probes at each count) costs a fraction of
    the timed calls.
    """
    threads = best_torch_threads(probe, calls=2)

    def run() -> Any:
        with torch_threads(threads):
            return fn()

    return run, threads


def _floored(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with noop_floor():
            return fn()

    return run


def _per(c: Comparison, n: int) -> Comparison:
    """Times per token of calls that produce ``n`` tokens (the ratios stand)."""
    return replace(c, baseline_ms=c.baseline_ms / n, optimized_ms=c.optimized_ms / n)


def review(size: str, progress: Progress) -> list[Row]:
    """The accelerated model's prefill and decode against transformers' path on the same weights."""
    import torch

    transformers_mamba()  # Skipped before any work
    L, new, rounds, frounds = TOKENS[size], NEW[size], ROUNDS[size], FLOOR_ROUNDS[size]
    config = dict(MODEL)
    if compiling_only():  # the kernels are the same for one layer
        config["num_hidden_layers"] = 1
    dev = cpu_device()
    with _quiet(), torch.no_grad():
        model = build(config)
        fast = accelerated_twin(model)
        ids = token_ids(config["vocab_size"], L)
        prompt = ids[:, :PROMPT]
        kept: dict[str, Any] = {}  # the peer's logits of its last timed prefill

        def prefill(m: Any, n: int = L, keep: str = "") -> Callable[[], Any]:
            def run() -> Any:
                out = m(ids[:, :n], use_cache=False).logits
                if keep:
                    kept[keep] = out
                return out

            return run

        def generate(m: Any, n: int = new, **kw: Any) -> Callable[[], Any]:
            return lambda: m.generate(
                prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw
            )

        def best(side: Callable[..., Any], m: Any, n: int, wrap: Any = None, **kw: Any) -> Any:
            w = wrap or (lambda fn: fn)
            return _at_best(w(side(m, n, **kw)), w(side(m, max(2, n // 8))))

        if compiling_only():  # compile the accelerated paths; time nothing
            prefill(fast)()
            generate(fast)()
            _exact(model)(prompt, use_cache=False)  # the float64 kernels of the errors' reference
            return []

        # every side (transformers, propopt, the floor) at its faster torch thread count
        theirs, threads = best(prefill, model, L, keep="peer")
        ours, ours_threads = best(prefill, fast, L)
        floor, _ = best(prefill, model, L, _floored)
        c = compare(theirs, ours, rounds=rounds, tick=progress.tick)
        c = replace(c, baseline_threads=threads)
        f = compare(floor, ours, rounds=frounds, tick=progress.tick)

        theirs, dthreads = best(generate, model, new)
        ours, ours_dthreads = best(generate, fast, new)
        floor, _ = best(generate, model, new, _floored)
        cd = compare(theirs, ours, rounds=rounds, tick=progress.tick)
        cd = _per(replace(cd, baseline_threads=dthreads), new)
        fd = compare(floor, ours, rounds=frounds, tick=progress.tick)

        # errors: against the model in float64 (see _exact), transformers' float32 path too;
        # each call at the thread count chosen for it above (on a busy machine the other
        # count can be ten times slower)
        with torch_threads(ours_threads):
            exact = _exact(model)
            ref = exact(ids, use_cache=False).logits[0].numpy()
            err = max_rel(prefill(fast)()[0].numpy(), ref)
        err_peer = max_rel(kept["peer"][0].numpy(), ref)
        dec: dict[str, float] = {}
        for key, m, n in (("ours", fast, ours_dthreads), ("peer", model, dthreads)):
            with torch_threads(n):
                out = generate(m, output_logits=True, return_dict_in_generate=True)()
            with torch_threads(ours_threads):
                dec[key] = _decode_error(out, exact)
        derr, derr_peer = dec["ours"], dec["peer"]

    name = _name(config)
    peer = "transformers' default CPU path (its error {:.2f}x ours)"
    return [
        row(f"{name}, prefill of {L} tokens", size, *PREFILL, peer.format(err_peer / err), c,
            err, "max rel", dev, floor="no-op scan and conv", floor_ms=f.baseline_ms,
            floor_x=1.0 / f.ratio),
        row(f"{name}, generate {new} tokens after {PROMPT} (ms per token)", size, *DECODE,
            peer.format(derr_peer / derr), cd, derr, "max rel", dev,
            floor="no-op scan, state update and conv", floor_ms=fd.baseline_ms / new,
            floor_x=1.0 / fd.ratio),
    ]  # fmt: skip


def _exact(model: Any) -> Any:
    """The float64 reference: a float64 copy of ``model``, accelerated.

    propopt's path computes a float64 model in float64 throughout;
    transformers' path casts ``A``, ``D`` and the discretization to float32
    even there (about 3e-5 from a float64 result at 512 tokens, and slower
    than its float32 call).  The transformers' float32 error the rows also give,
    against this reference, checks it: the two float32 paths' errors are of
    the same size.  Decode is checked against this model's prefill path,
    which shares no kernel with the fused decode.
    """
    return accelerated_twin(copy.deepcopy(model).double())


def _decode_error(out: Any, exact: Any) -> float:
    """``max rel`` of the logits ``generate`` chose each token from (``output_logits``), against
    ``exact``'s forward of the generated sequence."""
    import torch

    got = torch.cat(out.logits).numpy()  # (new, vocab)
    ref = exact(out.sequences[:, :-1], use_cache=False).logits[0, PROMPT - 1 :]
    return max_rel(got, ref.numpy())
