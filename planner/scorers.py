"""Scorers: the values that guide search. One contract for all of them:

    scorer.score(prefixes, *, prompt_len=None, finished=None, affordable=None) -> list[float] in [0, 1]

`prefixes` are token-id lists (prompt ids + partial response ids). `prompt_len` says where the
response starts (needed by scorers that read the response's text); `finished[i]` says whether
prefix i is a complete response. `affordable(spend) -> bool` is what the search's budget has left
(`ComputeMeter.affords`): a scorer whose cost it can choose (Monte-Carlo rollouts) sizes its work to
fit, and `least_spend` is the least any scorer needs, which a strategy reserves when it sizes a
round (see `planner/budget.py`). The Monte-Carlo scorer is in planner/monte_carlo.py. Every scorer keeps `stats` (a `ComputeStats`: `calls`, and the
tokens it scored in `prompt_tokens`) and `num_parameters` for FLOP estimates (0 for scorers that
run no model of their own). `is_oracle` marks scorers that read the reference answer: training
only, and `planner.solve` refuses them unless `allow_oracle=True`.

Step scores along a path are combined by an aggregation from `AGGREGATIONS` (search-and-learn's
`sal/utils/score.py`: last, min, product; plus mean).
"""

from __future__ import annotations

import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from planner.answers import Equivalent, Extract, default_extract, default_verify
from planner.budget import Spend
from planner.policy.types import ComputeStats

__all__ = ["Scorer", "ModelScorer", "ConfidenceScorer", "RandomScorer", "OutcomeScorer", "VerifierOracleScorer",
           "AGGREGATIONS", "aggregate"]


# ---- step-score aggregation ---------------------------------------------------------------------
AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "last": lambda scores: float(scores[-1]),
    "min": lambda scores: float(min(scores)),
    "product": lambda scores: float(math.prod(scores)),
    "mean": lambda scores: float(sum(scores) / len(scores)),
}
"""How a path's step scores become one value (search-and-learn: last / min / prod)."""


def aggregate(scores: Sequence[float], how: str) -> float:
    if how not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {sorted(AGGREGATIONS)}; got {how!r}")
    if not scores:
        raise ValueError("aggregate needs at least one step score")
    return AGGREGATIONS[how](scores)


# ---- the contract -------------------------------------------------------------------------------
class Scorer(ABC):
    """Maps prefixes to values in [0, 1]. Subclasses implement `_score`."""

    is_oracle: bool = False
    """True when the scorer reads the reference answer (training only)."""
    num_parameters: int = 0
    """Parameters of the scorer's own model, for FLOPs (0 when it runs none)."""
    uses_step_logprobs: bool = False
    """True when `_score` reads the behaviour log-probabilities of each prefix's last step (passed as
    `step_logprobs`): what the engine returned while sampling it, free to read."""
    merges_calls: bool = False
    """Whether the calls of searches run together (`planner.scheduler.run_interleaved`) are answered as one
    (`_score_merged`): true for a scorer that runs its own model and nothing else (no policy calls, no
    per-search state), whose value of a prefix does not depend on the other prefixes of its call."""

    def __init__(self) -> None:
        self.stats = ComputeStats()

    def score(self, prefixes: Sequence[Sequence[int]], *, prompt_len: int | None = None,
              finished: Sequence[bool] | None = None, affordable: Callable[[Spend], bool] | None = None,
              step_logprobs: Sequence[Sequence[float]] | None = None) -> list[float]:
        prefixes = [list(map(int, p)) for p in prefixes]
        finished = [False] * len(prefixes) if finished is None else [bool(f) for f in finished]
        if len(finished) != len(prefixes):
            raise ValueError(f"finished has {len(finished)} entries for {len(prefixes)} prefixes")
        if not prefixes:
            return []
        self._fit(prefixes, prompt_len, finished, affordable)
        start = time.perf_counter()
        extra = {}
        if self.uses_step_logprobs:
            if step_logprobs is None or len(step_logprobs) != len(prefixes):
                raise ValueError(f"{type(self).__name__} reads each prefix's last-step log-probabilities: pass "
                                 "step_logprobs (one list per prefix; planner.strategies.common.evaluate does)")
            extra["step_logprobs"] = [list(map(float, lp)) for lp in step_logprobs]
        values = [float(v) for v in self._score(prefixes, prompt_len, finished, **extra)]
        self.stats.seconds += time.perf_counter() - start
        self.stats.calls += 1
        self.stats.prompt_tokens += sum(len(p) for p in prefixes)
        bad = [v for v in values if not 0.0 <= v <= 1.0]
        if len(values) != len(prefixes) or bad:
            raise ValueError(f"{type(self).__name__} must return one value in [0, 1] per prefix; got {values!r}")
        return values

    @abstractmethod
    def _score(self, prefixes: list[list[int]], prompt_len: int | None, finished: list[bool]) -> list[float]:
        """One value per prefix."""

    def _score_merged(self, calls: list[tuple[list[list[int]], int | None, list[bool]]]) -> list[list[float]]:
        """The values of several searches' calls `(prefixes, prompt_len, finished)` answered together
        (`merges_calls`); here one `_score` per call, and a model scorer runs one batch over them all."""
        return [self._score(*call) for call in calls]

    def least_spend(self, lengths: Sequence[int], finished: Sequence[bool | None],
                    prompt: Sequence[int]) -> Spend:
        """The least this scorer spends on prefixes of these lengths (finished[i]: None when not yet
        known) in a search whose prompt is `prompt`. Here: one forward pass over every prefix."""
        return Spend(scorer_tokens=sum(lengths))

    def _fit(self, prefixes: list[list[int]], prompt_len: int | None, finished: list[bool],
             affordable: Callable[[Spend], bool] | None) -> None:
        """Size this call's work to `affordable` (here: refuse a call the budget cannot pay for)."""
        if affordable is None:
            return
        least = self.least_spend([len(p) for p in prefixes], finished, prefixes[0][:prompt_len or 0])
        if not affordable(least):
            raise ValueError(f"{type(self).__name__} cannot score {len(prefixes)} prefixes within what the budget "
                             f"has left (it needs at least {least}): size the round with "
                             "planner.strategies.fitting.fit_round, which reserves the scoring")

    def reset(self, seed: int) -> None:
        """Called at the start of each search: reseed and drop per-problem caches (default: nothing)."""


def _response(prefix: list[int], prompt_len: int | None) -> list[int]:
    return prefix[prompt_len:] if prompt_len is not None else prefix


# ---- a model: process reward model or value head ------------------------------------------------
class ModelScorer(Scorer):
    """A PRM or value critic: a causal LM with a one-label token-classification head.

    The value of a prefix is the head's output at its last token, mapped to [0, 1] by `squash`:
    "sigmoid" (the head outputs a logit, as a PRM or a critic trained with a BCE loss) or "clamp"
    (the head regresses a value in [0, 1] directly, as a critic trained on Monte-Carlo returns).
    `model` is a Hugging Face folder (loaded with `AutoModelForTokenClassification`, num_labels=1)
    or an already-loaded torch module called as `model(input_ids=, attention_mask=[, position_ids=])`
    that returns logits of shape (B, T, 1) (or an object with `.logits`). Prefixes run in batches of
    `batch_size`, grouped by length; searches run together (`solve_batch`, the learner) have their calls
    of one round answered by one such pass over all their prefixes (`merges_calls`).
    """

    def __init__(self, model, *, squash: Literal["sigmoid", "clamp"] = "sigmoid",
                 padding_side: Literal["right", "left"] = "right", batch_size: int = 16,
                 pad_token_id: int | None = None, device: str | None = None, dtype: str = "float32") -> None:
        super().__init__()
        import torch

        if squash not in ("sigmoid", "clamp"):
            raise ValueError(f"squash must be one of ['clamp', 'sigmoid']; got {squash!r}")
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be one of ['left', 'right']; got {padding_side!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForTokenClassification

            model = AutoModelForTokenClassification.from_pretrained(model, num_labels=1,
                                                                    dtype=getattr(torch, dtype))
        self.model = model.to(device) if device else model
        self.model.eval()
        self.device = next(self.model.parameters()).device
        config = getattr(self.model, "config", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (getattr(config, "pad_token_id", None) or 0)
        self.squash, self.padding_side, self.batch_size = squash, padding_side, batch_size
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    merges_calls = True

    def _score(self, prefixes, prompt_len, finished):
        # Batches of similar lengths (less padding); a prefix's value depends on its batch only through
        # float rounding (tests/test_scorers.py).
        order = sorted(range(len(prefixes)), key=lambda i: (len(prefixes[i]), i))
        values = [0.0] * len(prefixes)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            for i, value in zip(chunk, self._score_batch([prefixes[i] for i in chunk])):
                values[i] = value
        return values

    def _score_merged(self, calls):
        """One batched forward over every call's prefixes (the values read nothing but the prefix)."""
        every = [prefix for prefixes, _, _ in calls for prefix in prefixes]
        values = self._score(every, None, [False] * len(every))
        out, start = [], 0
        for prefixes, _, _ in calls:
            out.append(values[start:start + len(prefixes)])
            start += len(prefixes)
        return out

    def _score_batch(self, batch: list[list[int]]) -> list[float]:
        import torch

        logits, last = self._head_outputs(batch)  # (B, T), (B,)
        raw = logits[torch.arange(len(batch), device=self.device), last]  # (B,)
        return self._squash(raw).tolist()

    def _squash(self, raw):
        import torch

        return torch.sigmoid(raw) if self.squash == "sigmoid" else raw.clamp(0.0, 1.0)

    def _head_outputs(self, batch: list[list[int]]):
        """The head's raw output at every position (B, T) of the padded batch, and the column of each
        prefix's last token (B,)."""
        import torch

        width = max(len(p) for p in batch)
        pad = [[self.pad_token_id] * (width - len(p)) for p in batch]
        if self.padding_side == "right":
            ids = [p + q for p, q in zip(batch, pad)]
            mask = [[1] * len(p) + [0] * len(q) for p, q in zip(batch, pad)]
        else:
            ids = [q + p for p, q in zip(batch, pad)]
            mask = [[0] * len(q) + [1] * len(p) for p, q in zip(batch, pad)]
        input_ids = torch.tensor(ids, device=self.device)  # (B, T)
        attention_mask = torch.tensor(mask, device=self.device)  # (B, T)
        kwargs = {}
        if self.padding_side == "left":  # positions must start at 0 at each row's first real token
            kwargs["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        logits = (out.logits if hasattr(out, "logits") else out).float()[..., 0]  # (B, T)
        last = (torch.tensor([len(p) - 1 for p in batch], device=self.device) if self.padding_side == "right"
                else torch.full((len(batch),), width - 1, device=self.device))
        return logits, last


# ---- the policy's own confidence ----------------------------------------------------------------
class ConfidenceScorer(Scorer):
    """The policy's confidence in a prefix's last step, from the log-probabilities of the step's
    sampled tokens: reduce="mean" gives exp(mean log-probability), the geometric mean of their
    probabilities (length-normalised, as MCTS's priors are); reduce="min" gives the probability of
    the step's least likely token, which a single slipped digit pulls down however long the step is.
    Both lie in (0, 1]. The engine returned those log-probabilities while sampling the step, so this
    scorer runs no model and costs no FLOPs; it is the free baseline a learned value must beat.
    A step without tokens gets `empty_value`."""

    uses_step_logprobs = True
    REDUCTIONS = ("mean", "min")

    def __init__(self, empty_value: float = 0.5, reduce: str = "mean") -> None:
        super().__init__()
        if not 0.0 <= empty_value <= 1.0:
            raise ValueError(f"empty_value must be in [0, 1]; got {empty_value!r}")
        if reduce not in self.REDUCTIONS:
            raise ValueError(f"reduce must be one of {list(self.REDUCTIONS)}; got {reduce!r}")
        self.empty_value = empty_value
        self.reduce = reduce

    def least_spend(self, lengths, finished, prompt) -> Spend:
        return Spend()

    def _score(self, prefixes, prompt_len, finished, step_logprobs):
        pool = min if self.reduce == "min" else (lambda lp: sum(lp) / len(lp))
        return [math.exp(pool(lp)) if lp else self.empty_value for lp in step_logprobs]


class RandomScorer(Scorer):
    """Uniform random values (seeded per search by `reset`): the floor a value must beat (0.5 sibling
    accuracy in expectation)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.reset(seed)

    def least_spend(self, lengths, finished, prompt) -> Spend:
        return Spend()

    def reset(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def _score(self, prefixes, prompt_len, finished):
        return self._rng.random(len(prefixes)).tolist()


# ---- an outcome reward: a function of the finished text -----------------------------------------
class OutcomeScorer(Scorer):
    """Scores finished responses only, with `reward_fn(response_text) -> float in [0, 1]` (an ORM,
    Cobbe et al. 2021). Unfinished prefixes get `unfinished_value` (neutral by default)."""

    def __init__(self, reward_fn: Callable[[str], float], decode: Callable[[list[int]], str],
                 unfinished_value: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= unfinished_value <= 1.0:
            raise ValueError(f"unfinished_value must be in [0, 1]; got {unfinished_value!r}")
        self.reward_fn, self.decode, self.unfinished_value = reward_fn, decode, unfinished_value

    def _score(self, prefixes, prompt_len, finished):
        return [float(self.reward_fn(self.decode(_response(p, prompt_len)))) if done else self.unfinished_value
                for p, done in zip(prefixes, finished)]


# ---- the verifier as an oracle ------------------------------------------------------------------
class VerifierOracleScorer(Scorer):
    """1.0 when the answer extracted from the prefix's response verifies against the reference,
    else 0.0. Reads the reference: training only (`is_oracle = True`)."""

    is_oracle = True

    def __init__(self, reference: str, decode: Callable[[list[int]], str], extract: Extract | None = None,
                 verify: Equivalent | None = None) -> None:
        super().__init__()
        self.reference, self.decode = reference, decode
        self.extract, self.verify = extract or default_extract, verify or default_verify

    def _score(self, prefixes, prompt_len, finished):
        values = []
        for prefix in prefixes:
            answer = self.extract(self.decode(_response(prefix, prompt_len)))
            values.append(float(answer is not None and self.verify(self.reference, answer)))
        return values
