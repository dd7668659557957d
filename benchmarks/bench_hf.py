"""Hugging Face transformers' Mamba-130m on CPU: ``accelerate(model)`` against transformers' path.

The 130m config with seeded random weights (:func:`propopt_case_studies.capstone.reviews.hf.build`;
nothing is downloaded), batch 1, float32.  The accelerated model
(:func:`propopt_case_studies.mamba.hf.accelerate`) shares the weights of the model
that runs transformers' default CPU path.
* prefill: ``use_cache=False``, every position's logits, 512 tokens;
* decode: ``generate`` of 16 greedy tokens after a 16-token prompt (the
  whole call).
``track_speedup_*`` time both sides in interleaved rounds in one run.  The
capstone's rows (``python -m propopt capstone --only hf``) add each side's
best torch thread count, the no-op floor and the errors against float64.
Without transformers (the ``hf`` extra) every benchmark here is skipped.
"""

from __future__ import annotations

from .common import Benchmark, ratio


def _models():
    """``(transformers' model, the accelerated twin)``; NotImplementedError without transformers."""
    from propopt_case_studies.capstone.reviews.common import Skipped
    from propopt_case_studies.capstone.reviews.hf import accelerated_twin, build

    try:
        model = build()
    except Skipped as e:
        raise NotImplementedError(str(e)) from None
    return model, accelerated_twin(model)


class HfMambaPrefill(Benchmark):
    """Prefill of ``tokens`` token ids, every position's logits."""

    params = [512]
    param_names = ["tokens"]
    repeat = (1, 3, 60.0)

    def setup(self, tokens):
        from propopt_case_studies.capstone.reviews.hf import token_ids

        self.model, self.fast = _models()
        self.ids = token_ids(self.model.config.vocab_size, tokens)
        self.propopt()  # compile

    def _prefill(self, model):
        import torch

        with torch.no_grad():
            return model(self.ids, use_cache=False).logits

    def propopt(self):
        return self._prefill(self.fast)

    def transformers(self):
        return self._prefill(self.model)

    def time_propopt(self, tokens):
        self.propopt()

    def time_transformers(self, tokens):
        self.transformers()

    def track_speedup_vs_transformers(self, tokens):
        return ratio(self.transformers, self.propopt, 3)

    track_speedup_vs_transformers.unit = "x"


class HfMambaDecode(Benchmark):
    """``generate`` of ``new`` greedy tokens after a 16-token prompt."""

    params = [16]
    param_names = ["new"]
    repeat = (1, 5, 60.0)

    def setup(self, new):
        from propopt_case_studies.capstone.reviews.hf import PROMPT, token_ids

        self.model, self.fast = _models()
        self.prompt = token_ids(self.model.config.vocab_size, PROMPT)
        self.new = new
        self.propopt()  # compile

    def _generate(self, model):
        import torch

        with torch.no_grad():
            return model.generate(
                self.prompt, max_new_tokens=self.new, min_new_tokens=self.new, do_sample=False
            )

    def propopt(self):
        return self._generate(self.fast)

    def transformers(self):
        return self._generate(self.model)

    def time_propopt(self, new):
        self.propopt()

    def time_transformers(self, new):
        self.transformers()

    def track_speedup_vs_transformers(self, new):
        return ratio(self.transformers, self.propopt, 3)

    track_speedup_vs_transformers.unit = "x"
