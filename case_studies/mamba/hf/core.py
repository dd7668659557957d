"""Run Hugging Face transformers' Mamba and Mamba-2 models on propopt's kernels.

:func:`accelerate` gives every ``MambaMixer`` / ``Mamba2Mixer`` of a model on
the CPU a forward of its own (an instance attribute; the class is not
touched) that computes what transformers' forward computes, with the same
treatment of ``attention_mask`` and the cache, on propopt's kernels:

* prefill without gradients: ``in_proj`` as separate GEMMs for the gate,
  the conv channels and (Mamba-2) ``dt``, so that each is contiguous; the
  causal conv1d, its SiLU and the padding mask in one numba pass
  (:mod:`._kernels`); Mamba-1: ``x_proj`` and ``dt_proj`` GEMMs, then
  :func:`selective_scan` with the softplus of ``dt``, ``D`` and the gate
  fused; Mamba-2: :func:`ssd_scan` with the softplus, ``dt_limit``, ``D``
  and the gate, then the grouped RMS norm in one numba pass;
* one decoded token with a cache (``generate``): ``in_proj``, one numba call
  (conv-state roll and update, conv, SiLU, Mamba-1's ``x_proj`` and
  ``dt_proj``, softplus, state update, ``D``, gate, Mamba-2's norm), and
  ``out_proj``, against about thirty torch calls;
* with gradients (training): transformers' torch operations around the
  scan, and :func:`selective_scan` / :func:`ssd_scan` under torch autograd.

A ``MambaForCausalLM`` / ``Mamba2ForCausalLM`` whose mixers are all patched
also gets a forward of its own for the calls ``generate`` makes after the
prompt (one token per sequence, with the cache, float32 weights on the CPU,
no gradients): each block (its RMS norm, ``in_proj``, the mixer's token,
``out_proj``, the residual add) is one numba call, and so is the head
(``norm_f``, ``lm_head``), with the matrix-vector products split by rows
between threads.  Decoding a token reads every weight once, so this runs at
the memory's read bandwidth, where transformers' layers run some forty small
torch operations each.  Every other call goes to the model's own forward,
whose mixers are patched as above.

:func:`restore` removes those attributes: afterwards the model is exactly
transformers' again.  The reference path of every fast path here is
transformers' own forward (the tests compare the two, both against a
float64 run).

One difference is deliberate: a Mamba-1 forward of several tokens that
continues a cache (chunked prefill) starts the scan from the cached SSM
state.  transformers' Mamba-1 starts it from zero there (while it does use
the cached conv state, and while its Mamba-2 uses both), so it forgets the
earlier chunks; in every other case the two agree to rounding.

Why an instance attribute and not transformers' kernel hooks: the hub
mapping (``kernels`` and ``use_kernelized_func``) needs the ``kernels``
package and a kernel repository, is registered process-wide and replaces
functions one at a time (the scan, the conv), so the layer's other small
operations stay; the ``mamba_ssm`` / ``causal_conv1d`` lookups are resolved
when ``modeling_mamba`` is imported and would take a package of that name
on the path (shadowing the real one).  Patching each mixer's ``forward``
reaches the whole layer, leaves other models in the process alone, and is
undone by deleting one attribute.
"""

from __future__ import annotations

import copy
import itertools
import weakref
from typing import Any

import numpy as np

from .._compute import compute_dtype, needs_grad
from ..scan import selective_scan
from ..ssd import ssd_scan
from . import _kernels as K

__all__ = ["accelerate", "is_accelerated", "is_usable_for", "restore"]

_PACKED_KWARGS = ("seq_idx", "cu_seqlens", "cu_seq_lens_q", "cu_seq_lens_k")


def _mixer_classes() -> tuple[type, type]:
    from transformers.models.mamba.modeling_mamba import MambaMixer
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    return MambaMixer, Mamba2Mixer


def is_usable_for(module: Any) -> bool:
    """Whether :func:`accelerate` would give ``module`` propopt's forward.

    True for a transformers ``MambaMixer`` or ``Mamba2Mixer`` (or a subclass
    that keeps its forward) whose parameters are all on the CPU, in float16,
    bfloat16, float32 or float64, with the SiLU activation, and whose
    ``forward`` is not already replaced on the instance (by :func:`accelerate`
    or by a hook such as accelerate's offloading).  Mixers on CUDA or the meta
    device are left to transformers.
    """
    import torch

    try:
        m1, m2 = _mixer_classes()
    except ImportError:
        return False
    cls = type(module)
    if not ((isinstance(module, m1) and cls.forward is m1.forward)
            or (isinstance(module, m2) and cls.forward is m2.forward)):  # fmt: skip
        return False
    if "forward" in vars(module) or getattr(module, "activation", None) != "silu":
        return False
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    params = list(module.parameters())
    return bool(params) and all(p.device.type == "cpu" and p.dtype in floats for p in params)


def is_accelerated(module: Any) -> bool:
    """Whether :func:`accelerate` patched ``module`` (a mixer or a causal LM), not yet restored."""
    f = vars(module).get("forward")
    return isinstance(f, _Forward) and f.__func__ in (_mamba_forward, _mamba2_forward, _lm_forward)


class _Forward:
    """``fn`` bound to a module through a weak reference.

    A bound method stored on the module would make a reference cycle
    (module, its ``__dict__``, the method, the module): a deleted model would
    then wait for Python's cycle collector, which runs on counts of objects,
    not bytes, so the weights of many discarded models could pile up.
    """

    __slots__ = ("__func__", "__weakref__", "_module")

    def __init__(self, fn: Any, module: Any) -> None:
        self.__func__ = fn
        self._module = weakref.ref(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__(self._module(), *args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Forward:  # a copied model calls itself
        return _Forward(self.__func__, copy.deepcopy(self._module(), memo))

    def __reduce__(self) -> tuple[Any, ...]:  # pickling, as a bound method pickles
        return (_Forward, (self.__func__, self._module()))


def accelerate(model: Any) -> Any:
    """Run every Mamba / Mamba-2 mixer of ``model`` on the CPU on propopt's kernels, in place.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers ``MambaForCausalLM``, ``MambaModel``,
        ``Mamba2ForCausalLM``, ``Mamba2Model``, or any module containing
        their mixers (a mixer itself included).  Mixers for which
        :func:`is_usable_for` is False (on CUDA, say) are left as they are.

    Returns
    -------
    The same ``model``.  Prefill, decoding with the model's cache
    (``generate``) and training (forward and backward) of each patched mixer
    then run on :func:`selective_scan` / :func:`ssd_scan` and the fused
    kernels of :mod:`._kernels`; a call that the fast forward does not
    cover (tensors moved off the CPU since, packed-sequence keyword
    arguments, a padding mask whose length is not the input's) goes to
    transformers' forward.

    Notes
    -----
    Work is that of transformers' layer; the scan is linear in the tokens
    (Mamba-1 in one fused pass, Mamba-2 by chunked GEMMs) instead of
    transformers' CPU path, a Python loop over tokens (Mamba-1) or
    ``O(L chunk_size)`` einsums with explicit masks (Mamba-2).  Outputs agree
    with transformers' to rounding, and are at least as close to a float64
    run (float32 and bfloat16 models are computed in float32 around the
    GEMMs).

    Examples
    --------
    >>> import torch
    >>> from transformers import MambaConfig, MambaForCausalLM
    >>> from propopt_case_studies.mamba.hf import accelerate, restore
    >>> cfg = MambaConfig(vocab_size=64, hidden_size=32, state_size=4, num_hidden_layers=1)
    >>> model = MambaForCausalLM(cfg).eval()
    >>> ids = torch.arange(10)[None]
    >>> with torch.no_grad():
    ...     ref = model(ids).logits
    ...     fast = accelerate(model)(ids).logits
    >>> bool(torch.allclose(ref, fast, atol=1e-4)), restore(model) is model
    (True, True)

    References
    ----------
    A. Gu and T. Dao, "Mamba: Linear-Time Sequence Modeling with Selective
    State Spaces", 2023; T. Dao and A. Gu, "Transformers are SSMs", ICML 2024
    (the layers); transformers' ``modeling_mamba.py`` and ``modeling_mamba2.py``
    (the forwards mirrored here).
    """
    if not callable(getattr(model, "modules", None)):
        raise TypeError(f"accelerate needs a torch.nn.Module (a transformers Mamba model or "
                        f"one containing its mixers), got {type(model).__name__}")  # fmt: skip
    m1, _ = _mixer_classes()
    for mod in model.modules():
        if is_usable_for(mod):
            fwd = _mamba_forward if isinstance(mod, m1) else _mamba2_forward
            mod.forward = _Forward(fwd, mod)
    for mod in model.modules():
        if _is_causal_lm(mod) and "forward" not in vars(mod):
            mod.forward = _Forward(_lm_forward, mod)
    return model


def restore(model: Any) -> Any:
    """Undo :func:`accelerate`: patched mixers get transformers' forward back; returns ``model``."""
    if not callable(getattr(model, "modules", None)):
        raise TypeError(f"restore needs a torch.nn.Module, got {type(model).__name__}")
    for mod in model.modules():
        if is_accelerated(mod):
            del mod.forward
    return model


def _is_causal_lm(module: Any) -> bool:
    """A transformers ``MambaForCausalLM`` / ``Mamba2ForCausalLM`` with its class's forward."""
    from transformers.models.mamba.modeling_mamba import MambaForCausalLM
    from transformers.models.mamba2.modeling_mamba2 import Mamba2ForCausalLM

    cls = type(module)
    return ((isinstance(module, MambaForCausalLM) and cls.forward is MambaForCausalLM.forward)
            or (isinstance(module, Mamba2ForCausalLM)
                and cls.forward is Mamba2ForCausalLM.forward))  # fmt: skip


# ---------------------------------------------------------------- shared
def _original(self: Any, hidden_states: Any, cache: Any, attention_mask: Any,
              kwargs: dict[str, Any]) -> Any:  # fmt: skip
    return type(self).forward(self, hidden_states, cache=cache, attention_mask=attention_mask,
                              **kwargs)  # fmt: skip


def _covered(self: Any, hidden_states: Any, attention_mask: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the fast forward covers this call (else transformers' forward runs)."""
    if hidden_states.device.type != "cpu" or self.in_proj.weight.device.type != "cpu":
        return False
    if any(kwargs.get(k) is not None for k in _PACKED_KWARGS):
        return False
    return attention_mask is None or (
        attention_mask.ndim == 2 and tuple(attention_mask.shape) == tuple(hidden_states.shape[:2])
    )


def _states(self: Any, cache: Any) -> tuple[Any, Any]:
    if cache is None:
        return None, None
    return (cache.get_conv_state(self.layer_idx, state_idx=0),
            cache.get_recurrent_state(self.layer_idx, state_idx=0))  # fmt: skip


def _is_decode(self: Any, cache: Any, conv_state: Any, ssm_state: Any, L: int,
               attention_mask: Any) -> bool:  # fmt: skip
    return (conv_state is not None and ssm_state is not None and L == 1
            and attention_mask is None and not cache.is_recording_past(self.layer_idx))  # fmt: skip


def _mask(hidden_states: Any, attention_mask: Any) -> Any:
    """transformers' ``apply_mask_to_padding_states``."""
    if attention_mask is None:
        return hidden_states
    return (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)


def _np(t: Any, ct: Any) -> np.ndarray:
    """A C-contiguous numpy view (or copy) of ``t`` in dtype ``ct``."""
    return t.detach().to(ct).contiguous().numpy()  # type: ignore[no-any-return]


def _inout(t: Any, ct: Any) -> tuple[np.ndarray, Any]:
    """``t`` as a numpy array the kernel may update, and a function writing it back."""
    if t.dtype == ct and t.is_contiguous():
        return t.numpy(), lambda: None
    work = t.to(ct).contiguous()
    return work.numpy(), lambda: t.copy_(work)


def _linear(x: Any, lin: Any, rows: slice) -> Any:
    import torch.nn.functional as F

    b = None if lin.bias is None else lin.bias[rows]
    return F.linear(x, lin.weight[rows], b)


def _conv_prefill(self: Any, x: Any, cache: Any, L: int, attention_mask: Any, grad: bool,
                  splits: tuple[int, ...]) -> list[Any]:  # fmt: skip
    """Conv, SiLU and mask of the conv channels ``x`` (batch, L, C), as transformers.

    With a cache, the cache's conv state is updated as transformers does, and
    the conv runs over what ``update_conv_state`` returns (the cached context
    followed by ``x``).  Returns (batch, L, c_i) tensors, one per split.
    """
    import torch
    import torch.nn.functional as F

    full = x.transpose(1, 2)
    if cache is not None:
        full = cache.update_conv_state(full, self.layer_idx, conv_kernel_size=self.conv_kernel_size)
    w = self.conv1d.weight
    if grad:
        T = full.shape[-1]
        out = F.conv1d(full.to(w.dtype), w, self.conv1d.bias, padding=w.shape[-1] - 1,
                       groups=w.shape[0])[..., :T][..., -L:]  # fmt: skip
        out = _mask(F.silu(out).to(x.dtype).transpose(1, 2), attention_mask)
        return list(out.split(splits, dim=-1))
    ct = compute_dtype("torch", x.dtype)
    b = self.conv1d.bias
    bias = _np(torch.zeros(w.shape[0]) if b is None else b, ct)
    mask = None if attention_mask is None else _np(attention_mask, ct)
    outs = K.conv_silu(_np(full.transpose(1, 2), ct), _np(w[:, 0].t(), ct), bias, mask, L, splits)
    return [torch.from_numpy(o) for o in outs]


# ---------------------------------------------------------------- Mamba-1
def _mamba_forward(self: Any, hidden_states: Any, cache: Any = None, attention_mask: Any = None,
                   **kwargs: Any) -> Any:  # fmt: skip
    """propopt's forward of a transformers ``MambaMixer`` (see :func:`accelerate`)."""
    import torch

    cache = kwargs.pop("cache_params", cache)
    if not _covered(self, hidden_states, attention_mask, kwargs):
        return _original(self, hidden_states, cache, attention_mask, kwargs)
    L = hidden_states.shape[1]
    dtype = hidden_states.dtype
    Di, R, N = self.intermediate_size, self.time_step_rank, self.ssm_state_size
    conv_state, ssm_state = _states(self, cache)
    grad = needs_grad(itertools.chain((hidden_states,), self.parameters()))
    if not grad and _is_decode(self, cache, conv_state, ssm_state, L, attention_mask):
        return _mamba_token(self, hidden_states, conv_state, ssm_state)
    A = -torch.exp(self.A_log.float())
    h = _mask(hidden_states, attention_mask)
    if grad:  # transformers' operations (autograd), the scan excepted
        x, z = self.in_proj(h).chunk(2, dim=-1)
    else:  # each half contiguous: the kernels read them in place
        x, z = _linear(h, self.in_proj, slice(0, Di)), _linear(h, self.in_proj, slice(Di, None))
    (xc,) = _conv_prefill(self, x, cache, L, attention_mask, grad, (Di,))
    if not grad:
        z = z.to(xc.dtype)
    ts, B, C = torch.split(self.x_proj(xc.to(self.x_proj.weight.dtype)), [R, N, N], dim=-1)
    if grad:
        delta = self.dt_proj.weight @ ts.transpose(1, 2)  # (batch, Di, L)
    else:
        delta = (ts @ self.dt_proj.weight.t()).to(xc.dtype).transpose(1, 2)  # (batch, L, Di) memory
    bias = None if self.dt_proj.bias is None else self.dt_proj.bias.float()
    y, last = selective_scan(
        xc.transpose(1, 2), delta, A, B.transpose(1, 2), C.transpose(1, 2), D=self.D.float(),
        z=z.transpose(1, 2), delta_bias=bias, delta_softplus=True, return_last_state=True,
        initial_state=ssm_state)  # fmt: skip
    if cache is not None:
        cache.update_recurrent_state(last, self.layer_idx)
    return self.out_proj(y.transpose(1, 2).to(dtype))


def _token(self: Any, hidden_states: Any, conv_state: Any, ssm_state: Any, step: Any) -> Any:
    """One decoded token of a mixer: ``in_proj``, the fused numba ``step``, ``out_proj``.

    ``step(proj, ct, conv_state, conv_weight, conv_bias, ssm_state)`` gets
    NumPy views in the compute dtype ``ct`` and updates both states in place;
    they are written back into the cache's tensors afterwards.
    """
    import torch

    proj = self.in_proj(hidden_states[:, 0])
    ct = compute_dtype("torch", proj.dtype)
    cs, put_cs = _inout(conv_state, ct)
    hs, put_hs = _inout(ssm_state, ct)
    c = self.conv1d
    cb = torch.zeros(c.weight.shape[0], dtype=ct) if c.bias is None else c.bias
    y = step(_np(proj, ct), ct, cs, _np(c.weight[:, 0], ct), _np(cb, ct), hs)
    put_cs()
    put_hs()
    return self.out_proj(torch.from_numpy(y).to(hidden_states.dtype)[:, None])


def _mamba_token(self: Any, hidden_states: Any, conv_state: Any, ssm_state: Any) -> Any:
    import torch

    def step(xz: Any, ct: Any, cs: Any, cw: Any, cb: Any, hs: Any) -> Any:
        bias = self.dt_proj.bias
        db = torch.zeros(self.dt_proj.weight.shape[0], dtype=ct) if bias is None else bias
        return K.mamba_token(xz, cs, cw, cb, _np(self.x_proj.weight, ct),
                             _np(self.dt_proj.weight, ct), _np(db, ct),
                             _np(-torch.exp(self.A_log.float()), ct), _np(self.D, ct),
                             hs)  # fmt: skip

    return _token(self, hidden_states, conv_state, ssm_state, step)


# ---------------------------------------------------------------- Mamba-2
def _mamba2_forward(self: Any, hidden_states: Any, cache: Any = None, attention_mask: Any = None,
                    **kwargs: Any) -> Any:  # fmt: skip
    """propopt's forward of a transformers ``Mamba2Mixer`` (see :func:`accelerate`)."""
    import torch

    cache = kwargs.pop("cache_params", cache)
    if not _covered(self, hidden_states, attention_mask, kwargs):
        return _original(self, hidden_states, cache, attention_mask, kwargs)
    nb, L, _ = hidden_states.shape
    dtype = hidden_states.dtype
    H, P, G, N = self.num_heads, self.head_dim, self.n_groups, self.ssm_state_size
    Di, conv_dim = self.intermediate_size, self.conv_dim
    conv_state, ssm_state = _states(self, cache)
    grad = needs_grad(itertools.chain((hidden_states,), self.parameters()))
    if not grad and _is_decode(self, cache, conv_state, ssm_state, L, attention_mask):
        return _mamba2_token(self, hidden_states, conv_state, ssm_state)
    A = -torch.exp(self.A_log.float())
    h = _mask(hidden_states, attention_mask)
    if grad:
        gate, xBC, dt = self.in_proj(h).split([Di, conv_dim, H], dim=-1)
    else:
        gate = _linear(h, self.in_proj, slice(0, Di))
        xBC = _linear(h, self.in_proj, slice(Di, Di + conv_dim))
        dt = _linear(h, self.in_proj, slice(Di + conv_dim, None))
    x, B, C = _conv_prefill(self, xBC, cache, L, attention_mask, grad, (Di, G * N, G * N))
    # transformers' scan computes in float32 (or float64): so does this one, gate included
    ct = compute_dtype("torch", x.dtype)
    y, final = ssd_scan(
        x.to(ct).reshape(nb, L, H, P), dt, A, B.reshape(nb, L, G, N), C.reshape(nb, L, G, N),
        chunk_size=self.chunk_size, D=self.D, z=gate.to(ct).reshape(nb, L, H, P),
        dt_bias=self.dt_bias, initial_states=ssm_state, dt_softplus=True,
        dt_limit=tuple(self.time_step_limit), return_final_states=True)  # fmt: skip
    if cache is not None:
        cache.update_recurrent_state(final, layer_idx=self.layer_idx)
    y = y.reshape(nb, L, Di)
    if grad:
        y = self.norm(y)  # the gate is applied: norm(y silu(gate)) is transformers' norm(y, gate)
    else:
        n = self.norm
        w = _np(n.weight, ct)
        flat = y.numpy().reshape(nb * L, Di)  # ssd_scan's fresh output: normed in place
        flat = K.group_rms_norm(flat, w, n.variance_epsilon, n.group_size, out=flat)
        y = torch.from_numpy(flat)
        y = y.reshape(nb, L, Di)
    return self.out_proj(y.to(dtype))


def _mamba2_token(self: Any, hidden_states: Any, conv_state: Any, ssm_state: Any) -> Any:
    import torch

    def step(zxbcdt: Any, ct: Any, cs: Any, cw: Any, cb: Any, hs: Any) -> Any:
        n = self.norm
        A = _np(-torch.exp(self.A_log.float()), ct)  # in float32, as transformers
        return K.mamba2_token(zxbcdt, cs, cw, cb, A, _np(self.D, ct),
                              _np(self.dt_bias, ct), hs, _np(n.weight, ct),
                              n.variance_epsilon, self.n_groups)  # fmt: skip

    return _token(self, hidden_states, conv_state, ssm_state, step)


# ---------------------------------------------------------------- one token, whole model
def _lm_forward(self: Any, input_ids: Any = None, attention_mask: Any = None,
                inputs_embeds: Any = None, cache: Any = None, labels: Any = None,
                output_hidden_states: Any = None, return_dict: Any = None, use_cache: Any = None,
                logits_to_keep: Any = 0, **kwargs: Any) -> Any:  # fmt: skip
    """propopt's forward of a transformers Mamba / Mamba-2 causal LM (see :func:`accelerate`)."""
    cache = kwargs.pop("cache_params", cache)
    cfg = self.config
    if output_hidden_states is None:
        output_hidden_states = cfg.output_hidden_states
    plan = None
    if not (kwargs or labels is not None or output_hidden_states or inputs_embeds is not None
            or attention_mask is not None or not isinstance(logits_to_keep, int)):  # fmt: skip
        plan = _decode_plan(self, input_ids, cache)
    if plan is None:
        return type(self).forward(
            self, input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
            cache=cache, labels=labels, output_hidden_states=output_hidden_states,
            return_dict=return_dict, use_cache=use_cache, logits_to_keep=logits_to_keep,
            **kwargs)  # fmt: skip
    logits = _decode_token(self, input_ids, plan)
    if use_cache is None:
        use_cache = cfg.use_cache if not self.training else False
    if not (return_dict if return_dict is not None else cfg.return_dict):
        return (logits, cache)
    from transformers.models.mamba.modeling_mamba import MambaCausalLMOutput, MambaForCausalLM
    from transformers.models.mamba2.modeling_mamba2 import Mamba2CausalLMOutput

    out = MambaCausalLMOutput if isinstance(self, MambaForCausalLM) else Mamba2CausalLMOutput
    return out(loss=None, logits=logits, cache=cache if use_cache else None, hidden_states=None)


class _NotCovered(Exception):
    """A tensor of the model that the one-token path does not take (not float32 on the CPU)."""


class _Views:
    """NumPy views of a model's float32 CPU tensors, reused while each tensor is unchanged.

    A view is kept per tensor object and its data pointer, so that ``model.to``
    (new data in the same parameter) and assigning a new parameter are seen;
    in-place updates (an optimizer step, ``load_state_dict``) show through
    the view.  Converting about 300 tensors anew would cost a few percent of
    a token.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int, np.ndarray]] = {}
        self._zeros: dict[int, np.ndarray] = {}
        self._A: dict[int, tuple[Any, int, int, np.ndarray]] = {}
        #: the last token's plan per cache (dropped with the cache)
        self.plans: weakref.WeakKeyDictionary[Any, tuple[_Watch, list[tuple[Any, ...]]]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, t: Any) -> np.ndarray:
        ptr = t.data_ptr()
        hit = self._seen.get(id(t))
        if hit is not None and hit[0] is t and hit[1] == ptr:
            return hit[2]
        view = self.once(t)
        self._seen[id(t)] = (t, ptr, view)
        return view

    @staticmethod
    def once(t: Any) -> np.ndarray:
        """A view not kept (for the cache's states, new with every ``generate``)."""
        import torch

        if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
            raise _NotCovered
        return t.detach().numpy()  # type: ignore[no-any-return]

    def A(self, A_log: Any) -> np.ndarray:
        """``-exp(A_log)`` in float32 (as transformers), kept while ``A_log`` is unchanged
        (the same tensor, data pointer and version: in-place updates count)."""
        import torch

        key = (A_log.data_ptr(), A_log._version)
        hit = self._A.get(id(A_log))
        if hit is not None and hit[0] is A_log and hit[1:3] == key:
            return hit[3]
        with torch.no_grad():
            A = self.once(-torch.exp(A_log.float()))
        self._A[id(A_log)] = (A_log, *key, A)
        return A

    def bias(self, lin: Any) -> np.ndarray:
        """A linear or conv layer's bias, zeros where it has none."""
        if lin.bias is not None:
            return self(lin.bias)
        n = lin.weight.shape[0]
        if n not in self._zeros:
            self._zeros[n] = np.zeros(n, np.float32)
        return self._zeros[n]


#: The views of each accelerated model, dropped with the model.
_VIEWS: weakref.WeakKeyDictionary[Any, _Views] = weakref.WeakKeyDictionary()


def _decode_plan(self: Any, input_ids: Any, cache: Any) -> list[tuple[Any, ...]] | None:
    """The arguments of each block's one-token kernel, or ``None`` where the call is not
    covered: one token per sequence after a cached prefix, every mixer patched, float32
    weights and states on the CPU, no gradients.

    The plan of the last token is reused while what it was read from is unchanged
    (:class:`_Watch`): building it anew took 1-1.5 ms a token, 5% of a 130m decode.
    """
    import torch

    if (cache is None or input_ids is None or input_ids.ndim != 2 or input_ids.shape[1] != 1
            or input_ids.device.type != "cpu" or input_ids.is_floating_point()
            or input_ids.min() < 0
            or input_ids.max() >= self.backbone.embeddings.weight.shape[0]):  # fmt: skip
        return None  # out-of-range ids get transformers' error
    if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
        return None
    views = _VIEWS.get(self)
    if views is None:
        views = _VIEWS.setdefault(self, _Views())
    kept = views.plans.get(cache)
    if kept is not None and kept[0].holds(cache):
        return kept[1]
    watch = _Watch()
    plan = _build_plan(self, cache, views, watch)
    if plan is None:
        views.plans.pop(cache, None)
    else:
        views.plans[cache] = (watch, plan)
    return plan


def _build_plan(self: Any, cache: Any, views: _Views,
                w: _Watch) -> list[tuple[Any, ...]] | None:  # fmt: skip
    """:func:`_decode_plan`'s plan, every module attribute read through ``w``."""
    _, m2 = _mixer_classes()
    get = w.get
    plan: list[tuple[Any, ...]] = []
    try:
        bb = get(self, "backbone")
        for layer in w.modules(get(bb, "layers")):
            mix = get(layer, "mixer")
            get(mix, "forward")  # restore() removes it
            if not is_accelerated(mix):
                return None
            idx = get(mix, "layer_idx")
            conv_state, ssm_state = w.states(cache, idx)
            if conv_state is None or ssm_state is None or cache.is_recording_past(idx):
                return None
            norm = get(layer, "norm")
            in_proj, conv1d, out_proj = (
                get(mix, "in_proj"),
                get(mix, "conv1d"),
                get(mix, "out_proj"),
            )
            common = (views(w.t(get(norm, "weight"))), get(norm, "variance_epsilon"),
                      views(w.t(get(in_proj, "weight"))), views.bias(w.bias(in_proj)),
                      views.once(conv_state), views(w.t(get(conv1d, "weight")))[:, 0],
                      views.bias(w.bias(conv1d)))  # fmt: skip
            out = (views(w.t(get(out_proj, "weight"))), views.bias(w.bias(out_proj)))
            A = views.A(w.version(get(mix, "A_log")))
            if isinstance(mix, m2):
                n = get(mix, "norm")
                plan.append((True, *common, A, views(w.t(get(mix, "D"))),
                             views(w.t(get(mix, "dt_bias"))), views.once(ssm_state),
                             views(w.t(get(n, "weight"))), get(n, "variance_epsilon"),
                             get(mix, "n_groups"), *out))  # fmt: skip
            else:
                x_proj, dt_proj = get(mix, "x_proj"), get(mix, "dt_proj")
                plan.append((False, *common, views(w.t(get(x_proj, "weight"))),
                             views(w.t(get(dt_proj, "weight"))), views.bias(w.bias(dt_proj)), A,
                             views(w.t(get(mix, "D"))), views.once(ssm_state), *out))  # fmt: skip
        norm_f, head = get(bb, "norm_f"), get(self, "lm_head")
        plan.append((views(w.t(get(norm_f, "weight"))), get(norm_f, "variance_epsilon"),
                     views(w.t(get(head, "weight"))), views.bias(w.bias(head)),
                     views(w.t(get(get(bb, "embeddings"), "weight")))))  # fmt: skip
    except _NotCovered:
        return None
    return plan


_MISSING = object()


class _Watch:
    """What a one-token plan was read from, to tell whether it still holds.

    Each module attribute the plan reads is looked up in the module's own
    dicts (parameters, submodules, buffers, plain attributes) and kept with
    the object found there, each module list with its length, each tensor
    with its data pointer, ``A_log`` with its version (``A`` is derived from
    it) and each layer's cache states with the tensors found.  The plan holds
    while all of them are unchanged: assigning a parameter, a submodule or an
    attribute, ``model.to``, ``restore``, an in-place change of ``A_log`` or
    new cache states all build a new one.  In-place changes of the weights
    need no rebuild: the plan's arrays are views of them.
    """

    def __init__(self) -> None:
        self.slots: list[tuple[dict[str, Any], str, Any]] = []
        self.sizes: list[tuple[dict[str, Any], int]] = []
        self.ptrs: list[tuple[Any, int]] = []
        self.versions: list[tuple[Any, int]] = []
        self.layer_states: list[tuple[int, Any, Any]] = []

    def get(self, module: Any, name: str) -> Any:
        d = vars(module)
        for where in (d["_parameters"], d["_modules"], d["_buffers"], d):
            if name in where:
                value = where[name]
                self.slots.append((where, name, value))
                return value
        raise _NotCovered  # a property or class attribute: not a model this path knows

    def modules(self, seq: Any) -> list[Any]:
        d = vars(seq)["_modules"]
        self.sizes.append((d, len(d)))
        for name, m in d.items():
            self.slots.append((d, name, m))
        return list(d.values())

    def t(self, tensor: Any) -> Any:
        self.ptrs.append((tensor, tensor.data_ptr()))
        return tensor

    def bias(self, lin: Any) -> Any:
        b = self.get(lin, "bias")
        if b is not None:
            self.t(b)
        self.t(self.get(lin, "weight"))
        return lin

    def version(self, tensor: Any) -> Any:
        self.versions.append((tensor, tensor._version))
        return self.t(tensor)

    def states(self, cache: Any, idx: int) -> tuple[Any, Any]:
        cs = cache.get_conv_state(idx, state_idx=0)
        hs = cache.get_recurrent_state(idx, state_idx=0)
        self.layer_states.append((idx, cs, hs))
        if cs is not None and hs is not None:
            self.t(cs)
            self.t(hs)
        return cs, hs

    def holds(self, cache: Any) -> bool:
        return (all(len(d) == n for d, n in self.sizes)
                and all(where.get(name, _MISSING) is v for where, name, v in self.slots)
                and all(t.data_ptr() == p for t, p in self.ptrs)
                and all(t._version == v for t, v in self.versions)
                and all(cache.get_conv_state(i, state_idx=0) is cs
                        and cache.get_recurrent_state(i, state_idx=0) is hs
                        and not cache.is_recording_past(i)
                        for i, cs, hs in self.layer_states))  # fmt: skip


def _decode_token(self: Any, input_ids: Any, plan: list[tuple[Any, ...]]) -> Any:
    """Logits (batch, 1, vocab) of one decoded token; updates the cache's states in place."""
    import torch

    from propopt import threads

    *blocks, (nw, eps, W, bias, emb) = plan
    h = emb[input_ids[:, 0].numpy()]  # a copy: the residual stream
    first = self.backbone.layers[0].mixer
    Di = first.intermediate_size
    if blocks[0][0]:
        xw, dbl = first.conv_dim, 0
    else:
        xw, dbl = Di, first.time_step_rank + 2 * first.ssm_state_size
    s = K.Scratch(h.shape[0], h.shape[1], first.in_proj.out_features, Di, xw, dbl,
                  np.dtype(np.float32))  # fmt: skip
    with threads.sized():
        for mamba2, *args in blocks:
            (K.mamba2_layer_token if mamba2 else K.mamba_layer_token)(h, *args, s)
        logits = K.final_logits(h, nw, eps, W, bias, s)
    return torch.from_numpy(logits)[:, None]
