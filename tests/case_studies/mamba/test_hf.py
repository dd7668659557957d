"""transformers' Mamba and Mamba-2 on propopt's kernels (propopt_case_studies.mamba.hf).

Models are built in code from the 130m configs with random weights (no
download): 2 layers and a 1000-token vocabulary by default, the full configs
under ``-m slow``.  Every comparison is against transformers' own path, and
where rounding differs, both are measured against a float64 run of the same
model (``model.double()``, transformers' path).
"""

import copy
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    Mamba2Config,
    Mamba2ForCausalLM,
    MambaConfig,
    MambaForCausalLM,
)
from transformers.models.mamba import modeling_mamba  # noqa: E402
from transformers.models.mamba2 import modeling_mamba2  # noqa: E402

from propopt_case_studies.mamba.hf import core as hf  # noqa: E402

MAMBA_130M = dict(vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=24,
                  expand=2, conv_kernel=4)  # fmt: skip
MAMBA2_130M = dict(vocab_size=50280, hidden_size=768, state_size=128, num_hidden_layers=24,
                   expand=2, head_dim=64, num_heads=24, n_groups=1, chunk_size=256)  # fmt: skip
SMALL = dict(num_hidden_layers=2, vocab_size=1000)

#: propopt's float32 logits may be this much farther from the float64 run
#: than transformers' float32 logits are (both are ~1e-6 of max |logit|:
#: rounding of different summation orders), plus one float32 ulp of slack.
SLACK = 1.5
ULP32 = 2.0**-23
#: bfloat16 models, RMS error of the logits against float64 (the max is
#: noisy: one logit in 10^5): propopt runs the conv, the scan and the norm in
#: float32, transformers runs the conv and parts of the scan in bfloat16.
#: Measured on three inputs: propopt 0.81-0.94x transformers' RMS error.
SLACK_BF16 = 1.1
#: Gradients of one training step against the float64 run's, relative to
#: each parameter's gradient norm: rounding noise, so per parameter either
#: path may be the closer one (propopt's error measured at most 1.24x
#: transformers' for Mamba-1, 1.38x for Mamba-2, 24 layers); over all
#: parameters together, SLACK as for the logits.
SLACK_GRAD_PARAM = 2.0

#: Prefill lengths: Mamba-2's 260 is a chunk of 256 and a partial chunk;
#: Mamba-1's reference is transformers' Python loop over tokens, so shorter.
L_PREFILL = {"mamba": 100, "mamba2": 260}
L_TRAIN = 48


def _build(which, full=False, seed=0):
    cfg = dict(MAMBA_130M if which == "mamba" else MAMBA2_130M)
    if not full:
        cfg.update(SMALL)
    torch.manual_seed(seed)
    if which == "mamba":
        return MambaForCausalLM(MambaConfig(**cfg)).eval()
    return Mamba2ForCausalLM(Mamba2Config(**cfg)).eval()


_MODELS = {}


def model_for(which, full=False):
    """A fresh copy of the (cached) random model."""
    key = (which, full)
    if key not in _MODELS:
        _MODELS[key] = _build(which, full)
    return copy.deepcopy(_MODELS[key])


def _ids(model, batch, L, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (batch, L), generator=g)


def _rel(a, b):
    """max |a - b| / max |b|."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def _rms(a, b):
    """RMS(a - b) / RMS(b)."""
    a, b = a.double(), b.double()
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()


def _logits(model, ids, **kw):
    with torch.no_grad():
        return model(ids, **kw).logits


class Spy:
    """Counts the calls of propopt's kernels under ``hf`` (so a fallback cannot pass unseen)."""

    def __init__(self, monkeypatch):
        self.calls = {}
        for name in (
            "conv_silu",
            "mamba_token",
            "mamba2_token",
            "group_rms_norm",
            "mamba_layer_token",
            "mamba2_layer_token",
            "final_logits",
        ):
            monkeypatch.setattr(hf.K, name, self._wrap(name, getattr(hf.K, name)))
        for name in ("selective_scan", "ssd_scan"):
            monkeypatch.setattr(hf, name, self._wrap(name, getattr(hf, name)))

    def _wrap(self, name, fn):
        def f(*a, **k):
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*a, **k)

        return f


WHICH = ["mamba", "mamba2"]


def _check_logits(which, full, batch=2):
    model = model_for(which, full)
    ids = _ids(model, batch, L_PREFILL[which])
    exact = _logits(copy.deepcopy(model).double(), ids)
    ref = _logits(model, ids)
    fast = _logits(hf.accelerate(model), ids)
    err_hf, err_pp = _rel(ref, exact), _rel(fast, exact)
    assert err_pp <= SLACK * err_hf + ULP32, (err_pp, err_hf)


@pytest.mark.parametrize("which", WHICH)
def test_logits_as_close_to_float64_as_transformers(which, monkeypatch):
    spy = Spy(monkeypatch)
    _check_logits(which, full=False)
    scan = "selective_scan" if which == "mamba" else "ssd_scan"
    assert spy.calls["conv_silu"] == 2 and spy.calls[scan] == 2  # per layer: fused, no fallback


@pytest.mark.parametrize("which", WHICH)
def test_greedy_generate_gives_the_same_ids(which, monkeypatch):
    model = model_for(which)
    ids = _ids(model, 1, 16)
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        spy = Spy(monkeypatch)
        out = hf.accelerate(model).generate(ids, **kw)
    assert torch.equal(out, ref)
    block = "mamba_layer_token" if which == "mamba" else "mamba2_layer_token"
    # every decoded token: one fused call per block and one for the head
    assert spy.calls[block] == 2 * 31 and spy.calls["final_logits"] == 31
    assert "mamba_token" not in spy.calls and "mamba2_token" not in spy.calls


@pytest.mark.parametrize("which", WHICH)
def test_decoded_logits_as_close_to_float64_as_transformers(which, monkeypatch):
    """The whole-model token path (blocks and head fused), batch 3, against a float64 run."""
    model = model_for(which)
    ids = _ids(model, 3, 12)
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, output_logits=True,
              return_dict_in_generate=True)  # fmt: skip
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        spy = Spy(monkeypatch)
        fast = hf.accelerate(copy.deepcopy(model)).generate(ids, **kw)
        # the float64 model fed the same tokens
        exact = copy.deepcopy(model).double()(ref.sequences[:, :-1]).logits[:, ids.shape[1] - 1 :]
    assert torch.equal(fast.sequences, ref.sequences)
    assert spy.calls["final_logits"] == 9
    for step in range(1, 10):  # the decoded tokens (step 0 is the prompt's last logits)
        e = exact[:, step]
        err_hf, err_pp = _rel(ref.logits[step], e), _rel(fast.logits[step], e)
        assert err_pp <= SLACK * err_hf + ULP32, (step, err_pp, err_hf)


@pytest.mark.parametrize("which", WHICH)
def test_decode_sees_changed_weights_and_falls_back(which, monkeypatch):
    """Weights changed in place or replaced after a decode are used; other calls go to
    transformers' forward (with the mixers still patched)."""
    model = hf.accelerate(model_for(which))
    ids = _ids(model, 2, 6)
    kw = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False)
    with torch.no_grad():
        model.generate(ids, **kw)  # the weights' views are now kept
        mixer = model.backbone.layers[1].mixer
        mixer.out_proj.weight.mul_(3.0)  # in place
        mixer.in_proj.weight = torch.nn.Parameter(mixer.in_proj.weight * 0.5)  # replaced
        model.lm_head.weight.add_(0.01)  # tied to the embeddings: both change
        model.backbone.layers[0].mixer.A_log.sub_(0.5)  # A = -exp(A_log) is derived and kept
        fast = model.generate(ids, **kw, output_logits=True, return_dict_in_generate=True)
        ref = hf.restore(copy.deepcopy(model)).generate(
            ids, **kw, output_logits=True, return_dict_in_generate=True)  # fmt: skip
        assert torch.equal(fast.sequences, ref.sequences)
        assert _rel(fast.logits[-1], ref.logits[-1]) <= 1e-5
        spy = Spy(monkeypatch)
        first = model(ids, use_cache=True)
        nxt = ids[:, -1:]
        hidden = model(nxt, cache=first.cache, output_hidden_states=True)
        assert len(hidden.hidden_states) == model.config.num_hidden_layers + 1
        assert "final_logits" not in spy.calls  # the model's own forward, patched mixers
        assert spy.calls["mamba_token" if which == "mamba" else "mamba2_token"] == 2
        out = model(nxt, cache=first.cache, return_dict=False)  # tuple output, as transformers
        assert isinstance(out, tuple) and out[0].shape == (2, 1, model.config.vocab_size)
        assert spy.calls["final_logits"] == 1
        with pytest.raises(IndexError):  # out-of-range ids: transformers' own error
            model(torch.full((2, 1), model.config.vocab_size), cache=first.cache)


@pytest.mark.parametrize("which", WHICH)
def test_training_step_gradients_match(which):
    _check_grads(which, full=False)


def _check_grads(which, full):
    model = model_for(which, full).train()
    ids = _ids(model, 2, L_TRAIN)
    grads = []
    for m in (copy.deepcopy(model).double(), model, hf.accelerate(copy.deepcopy(model))):
        m.zero_grad()
        m(ids, labels=ids).loss.backward()
        grads.append({n: p.grad.double() for n, p in m.named_parameters() if p.grad is not None})
    exact, ref, got = grads
    assert exact.keys() == ref.keys() == got.keys() and len(ref) > 10

    def err(g, name=None):
        names = [name] if name else list(exact)
        diff = torch.cat([(g[n] - exact[n]).ravel() for n in names])
        return (diff.norm() / torch.cat([exact[n].ravel() for n in names]).norm()).item()

    for name in exact:
        assert err(got, name) <= SLACK_GRAD_PARAM * err(ref, name) + ULP32, name
    assert err(got) <= SLACK * err(ref) + ULP32, (err(got), err(ref))


@pytest.mark.parametrize("which", WHICH)
def test_left_padded_batch_matches(which):
    model = model_for(which)
    lengths = [21, 9, 14, 1, 17]  # 5 rows: the decode kernels run rows on threads
    L = max(lengths)
    ids = _ids(model, len(lengths), L)
    mask = torch.zeros(len(lengths), L, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, L - n :] = 1
    ids = ids.masked_fill(mask == 0, 0)  # left padding with token 0
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, attention_mask=mask)
    with torch.no_grad():
        ref, ref_gen = _logits(model, ids, attention_mask=mask), model.generate(ids, **kw)
        hf.accelerate(model)
        fast, fast_gen = _logits(model, ids, attention_mask=mask), model.generate(ids, **kw)
    assert _rel(fast, ref) <= 1e-5
    assert torch.equal(fast_gen, ref_gen)


@pytest.mark.parametrize("which", WHICH)
def test_bfloat16_model(which):
    model = model_for(which)
    ids = _ids(model, 2, 64)
    exact = _logits(copy.deepcopy(model).double(), ids)
    model = model.to(torch.bfloat16)
    ref = _logits(model, ids)
    fast = _logits(hf.accelerate(model), ids)
    assert fast.dtype == ref.dtype
    err_hf, err_pp = _rms(ref, exact), _rms(fast, exact)
    assert err_pp <= SLACK_BF16 * err_hf, (err_pp, err_hf)
    with torch.no_grad():  # decoding with bfloat16 conv states and float32 SSM states
        out = model.generate(ids[:1, :8], max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, 12)


VARIANTS = {
    "mamba-biases": (MambaConfig, dict(vocab_size=50, hidden_size=32, state_size=4, expand=2,
                                       num_hidden_layers=2, use_bias=True,
                                       use_conv_bias=False, conv_kernel=3)),
    "mamba2-groups": (Mamba2Config, dict(vocab_size=50, hidden_size=32, state_size=8, expand=2,
                                         head_dim=8, num_heads=8, n_groups=2, chunk_size=8,
                                         num_hidden_layers=2, use_bias=True)),
}  # fmt: skip


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("prompt", [1, 2, 19])
def test_config_variants_and_short_prompts(variant, prompt):
    """in_proj biases, no conv bias, conv kernel 3, groups; prompts shorter than the conv."""
    cls, cfg = VARIANTS[variant]
    torch.manual_seed(3)
    model_cls = MambaForCausalLM if cls is MambaConfig else Mamba2ForCausalLM
    model = model_cls(cls(**cfg)).eval()
    ids = _ids(model, 2, prompt)
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    with torch.no_grad():
        ref, ref_gen = model(ids).logits, model.generate(ids, **kw)
        hf.accelerate(model)
        fast, fast_gen = model(ids).logits, model.generate(ids, **kw)
    assert _rel(fast, ref) <= 1e-5
    assert torch.equal(fast_gen, ref_gen)


@pytest.mark.parametrize("which", WHICH)
def test_chunked_prefill_continues_the_cache(which):
    """Tokens fed in two forwards with the cache give the logits of one forward.

    transformers' Mamba-2 does the same; its Mamba-1 restarts the SSM state from
    zero in the second forward (hf/core.py's module docstring).
    """
    model = hf.accelerate(model_for(which))
    ids = _ids(model, 2, 40)
    with torch.no_grad():
        whole = model(ids).logits
        first = model(ids[:, :25], use_cache=True)
        rest = model(ids[:, 25:], cache=first.cache, use_cache=True).logits
    assert _rel(torch.cat([first.logits, rest], 1), whole) <= 1e-5


@pytest.mark.parametrize("which", WHICH)
def test_restore_is_exact(which):
    model = model_for(which)
    module = modeling_mamba if which == "mamba" else modeling_mamba2
    globals_before = dict(vars(module))
    mixers = [m for m in model.modules() if hf.is_usable_for(m)]
    attrs_before = [set(vars(m)) for m in [model, *mixers]]
    ids = _ids(model, 2, 30)
    ref = _logits(model, ids)
    with torch.no_grad():
        ref_gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    modules_before = set(sys.modules)
    assert hf.accelerate(model) is model and all(hf.is_accelerated(m) for m in [model, *mixers])
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, do_sample=False)
    assert hf.restore(model) is model
    assert [set(vars(m)) for m in [model, *mixers]] == attrs_before
    assert not any(hf.is_accelerated(m) for m in [model, *mixers])
    assert all(vars(module)[k] is v for k, v in globals_before.items())
    shadows = {"mamba_ssm", "causal_conv1d"} & {m.split(".")[0] for m in sys.modules}
    assert not shadows - {m.split(".")[0] for m in modules_before}  # no package stood in
    assert torch.equal(_logits(model, ids), ref)
    with torch.no_grad():
        assert torch.equal(model.generate(ids, max_new_tokens=4, do_sample=False), ref_gen)
    hf.restore(model)  # a second restore is a no-op


def test_a_deleted_accelerated_model_is_freed_at_once():
    """No reference cycle: the weights go with the last reference, not at the next
    cycle collection (which counts objects, not bytes)."""
    import gc
    import weakref

    gc.disable()
    try:
        model = hf.accelerate(model_for("mamba"))
        with torch.no_grad():
            model.generate(_ids(model, 1, 4), max_new_tokens=2, do_sample=False)
        ref = weakref.ref(model)
        del model
        assert ref() is None
    finally:
        gc.enable()
    twin = copy.deepcopy(hf.accelerate(model_for("mamba2")))  # a copy calls itself
    assert twin.forward._module() is twin
    assert twin.backbone.layers[0].mixer.forward._module() is twin.backbone.layers[0].mixer


def test_mixers_off_the_cpu_are_left_alone():
    model = model_for("mamba")
    mixers = [layer.mixer for layer in model.backbone.layers]
    mixers[1].to("meta")  # reports a non-CPU device, as a CUDA mixer does
    assert [hf.is_usable_for(m) for m in mixers] == [True, False]
    hf.accelerate(model)
    assert [hf.is_accelerated(m) for m in mixers] == [True, False]
    assert not hf.is_usable_for(mixers[0])  # already patched
    # moved off the CPU after accelerate: the call goes to transformers' forward
    model.to("meta")
    with torch.no_grad():
        out = model(_ids(model, 1, 5).to("meta")).logits
    assert out.device.type == "meta"
    assert not hf.is_usable_for(torch.nn.Linear(2, 2))


def test_not_a_module_is_refused():
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        hf.accelerate("MambaForCausalLM")
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        hf.restore(None)


def test_accelerate_reaches_mixers_inside_any_module():
    inner = model_for("mamba2")
    wrapper = torch.nn.ModuleDict({"lm": inner})
    hf.accelerate(wrapper)
    assert all(hf.is_accelerated(layer.mixer) for layer in inner.backbone.layers)
    hf.restore(wrapper)
    assert not any(hf.is_accelerated(layer.mixer) for layer in inner.backbone.layers)


@pytest.mark.slow
@pytest.mark.parametrize("which", WHICH)
def test_full_130m_logits(which):
    _check_logits(which, full=True, batch=1)


@pytest.mark.slow
@pytest.mark.parametrize("which", WHICH)
def test_full_130m_generate(which):
    model = model_for(which, full=True)
    ids = _ids(model, 1, 16)
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        out = hf.accelerate(model).generate(ids, **kw)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("which", WHICH)
def test_kept_plan_sees_every_change(which, monkeypatch):
    """One cache decoded token by token: the one-token plan is built once and reused, and
    every change to the model between tokens reaches the next one (against transformers'
    path on a copy, changed alike)."""
    model = hf.accelerate(model_for(which))
    ref = hf.restore(copy.deepcopy(model))
    builds = []
    build = hf._build_plan
    monkeypatch.setattr(hf, "_build_plan", lambda *a: builds.append(1) or build(*a))
    ids = _ids(model, 2, 6)
    layers = lambda m: m.backbone.layers  # noqa: E731

    def new_param(m):
        proj = layers(m)[0].mixer.in_proj
        proj.weight = torch.nn.Parameter(proj.weight * 0.5)

    def new_norm(m):
        old = layers(m)[1].norm
        fresh = copy.deepcopy(old)
        fresh.weight.data.mul_(1.5)
        layers(m)[1].norm = fresh

    changes = [
        ("nothing", lambda m: None, 1),
        ("nothing again", lambda m: None, 1),
        ("a weight in place", lambda m: layers(m)[1].mixer.out_proj.weight.mul_(2.0), 1),
        ("a new parameter", new_param, 2),
        ("A_log in place", lambda m: layers(m)[0].mixer.A_log.sub_(0.3), 3),
        ("a new submodule", new_norm, 4),
        ("an attribute", lambda m: setattr(layers(m)[0].norm, "variance_epsilon", 0.25), 5),
        ("the head's data", lambda m: m.lm_head.weight.data.mul_(1.1), 5),
    ]  # fmt: skip
    with torch.no_grad():
        fast_cache = model(ids, use_cache=True).cache
        ref_cache = ref(ids, use_cache=True).cache
        tok = ids[:, -1:]
        for what, change, n_builds in changes:
            change(model)
            change(ref)
            fast = model(tok, cache=fast_cache).logits
            want = ref(tok, cache=ref_cache).logits
            assert _rel(fast, want) <= 1e-5, what
            assert len(builds) == n_builds, what
        hf.restore(model)  # the patched forward is gone: transformers' path, no plan
        assert _rel(model(tok, cache=fast_cache).logits, ref(tok, cache=ref_cache).logits) <= 1e-5
        hf.accelerate(model)
        fast = model(tok, cache=fast_cache).logits
        assert _rel(fast, ref(tok, cache=ref_cache).logits) <= 1e-5
        assert len(builds) == 6


@pytest.mark.slow
@pytest.mark.parametrize("which", WHICH)
def test_full_130m_training_gradients(which):
    _check_grads(which, full=True)
