"""A generative verifier as a scorer: a separate causal LM's probability of the tokens the policy wrote.

Generative verifiers (Zhang et al. 2024, "Generative Verifiers: Reward Modeling as Next-Token
Prediction") judge a solution with an LM's next-token probabilities instead of a value head. Here the
verifier reads the prompt and the response so far, teacher-forced, and the value of the prefix is

    reduce="min":  min_t  p_verifier(y_t | prompt, y_<t)        over the response's tokens y_t
    reduce="mean": exp(mean_t log p_verifier(y_t | prompt, y_<t))

The least likely token is the default: one digit the verifier would not have written is enough to
reject a response however long it is, and a prefix's value can only fall as it grows, so the value is
already a whole path's (beam's default `aggregation="last"` ranks paths by it). With the policy itself
as the verifier this is the policy's own confidence over the response (`planner.scorers.ConfidenceScorer`
reads it free, per step, from the sampled log-probabilities); it pays off with a verifier that knows
more than the policy (`scripts/lab/verifier_lm.py`: sibling-ranking accuracy 0.986-0.993 against the policy's
0.80-0.82 in docs/results.md). The verifier must share the policy's tokenizer: a prefix's ids are fed
to it as they are.

Cost: one forward pass over each prefix (`stats.prompt_tokens`, `num_parameters` for FLOPs).
"""

from __future__ import annotations

import math
import os

import torch

from planner.scorers import Scorer

__all__ = ["LikelihoodVerifier"]


class LikelihoodVerifier(Scorer):
    """A causal LM (a folder, or a loaded module returning `.logits` (B, T, V)) that scores the response
    part of each prefix by the probability it gives the response's tokens (see the module docstring)."""

    format = "likelihood"
    REDUCTIONS = ("min", "mean")
    merges_calls = False  # values need each call's prompt_len

    def __init__(self, model, *, reduce: str = "min", empty_value: float = 1.0, batch_size: int = 32,
                 device: str | None = None, dtype: str = "float32", decode=None) -> None:
        super().__init__()
        if reduce not in self.REDUCTIONS:
            raise ValueError(f"reduce must be one of {list(self.REDUCTIONS)}; got {reduce!r}")
        if not 0.0 <= empty_value <= 1.0:
            raise ValueError(f"empty_value must be in [0, 1]; got {empty_value!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype))
        self.model = model.to(device) if device else model
        self.model.eval()
        self.device = next(self.model.parameters()).device
        config = getattr(self.model, "config", None)
        self.vocab_size = getattr(config, "vocab_size", None)
        self.pad_token_id = getattr(config, "pad_token_id", None) or 0
        self.reduce, self.empty_value, self.batch_size = reduce, empty_value, batch_size
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        # `decode` is accepted (and unused) so that `load_scorer(folder, decode=...)` works for every format

    def token_logprobs(self, prefixes: list[list[int]], prompt_len: int) -> list[list[float]]:
        """Per prefix, log p_verifier of each response token (prefix[prompt_len:]) given all before it."""
        out: list[list[float]] = []
        for start in range(0, len(prefixes), self.batch_size):
            batch = prefixes[start:start + self.batch_size]
            width = max(len(p) for p in batch)
            ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, p in enumerate(batch):  # right padding: a causal LM's real positions never see the pads
                ids[i, :len(p)] = torch.tensor(p)
                mask[i, :len(p)] = 1
            with torch.no_grad():
                out_ = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
            logits = (out_.logits if hasattr(out_, "logits") else out_).float()  # (B, T, V)
            logp = torch.log_softmax(logits[:, :-1], dim=-1)  # (B, T-1, V): position t predicts token t+1
            chosen = logp.gather(-1, ids[:, 1:].to(self.device)[..., None])[..., 0]  # (B, T-1)
            for i, p in enumerate(batch):
                out.append(chosen[i, max(prompt_len, 1) - 1:len(p) - 1].tolist())
        return out

    def _score(self, prefixes, prompt_len, finished):
        if prompt_len is None:
            raise ValueError("LikelihoodVerifier needs prompt_len (where the response starts) to know which "
                             "tokens the policy wrote; planner's strategies pass it")
        largest = max(max(p, default=0) for p in prefixes)
        if self.vocab_size is not None and largest >= self.vocab_size:
            raise ValueError(f"token id {largest} is outside the verifier's vocabulary ({self.vocab_size} ids): "
                             "the verifier must share the policy's tokenizer (train it with "
                             "scripts/lab/verifier_lm.py)")
        values = []
        for logprobs in self.token_logprobs(prefixes, prompt_len):
            if not logprobs:
                values.append(self.empty_value)
            elif self.reduce == "min":
                values.append(math.exp(min(logprobs)))
            else:
                values.append(math.exp(sum(logprobs) / len(logprobs)))
        return values
