"""Value objects shared by every policy backend: sampling settings, samples, compute counters.

`SamplingParams` follows vLLM's `SamplingParams` in spirit (one validated value object whose
errors name the allowed range and the value received); `Sample` is one completion with the exact
token ids the engine sampled and their behaviour log-probabilities, so the learner trains on what
was sampled and never on re-tokenized text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

FinishReason = Literal["stop", "step", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions. Validated on construction."""

    n: int = 1
    """Samples per prompt (>= 1)."""
    temperature: float = 1.0
    """Softmax temperature (>= 0); 0 means greedy (argmax) decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1] (Holtzman et al. 2020); 1 keeps the whole distribution."""
    max_tokens: int = 64
    """Most tokens generated per sample (>= 1)."""
    stop: tuple[str, ...] = ()
    """Stop strings, e.g. a step delimiter "\\n\\n". Generation ends at the first token whose decoded
    text completes one of them; that token is kept, and the sample's finish_reason is "step"."""
    seed: int | None = None
    """Seed for this call's sampling; the same seed, prompts and backend give the same samples."""
    ignore_eos: bool = False
    """Keep generating past end-of-sequence (used by budget forcing to suppress the end)."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        _check(isinstance(self.n, int) and self.n >= 1, "n", "an integer >= 1", self.n)
        _check(_finite(self.temperature) and self.temperature >= 0, "temperature",
               "a number >= 0 (0 = greedy)", self.temperature)
        _check(_finite(self.top_p) and 0 < self.top_p <= 1, "top_p", "a number in (0, 1]", self.top_p)
        _check(isinstance(self.max_tokens, int) and self.max_tokens >= 1, "max_tokens",
               "an integer >= 1", self.max_tokens)
        _check(all(isinstance(s, str) and s for s in self.stop), "stop",
               "a tuple of non-empty strings", self.stop)
        _check(self.seed is None or isinstance(self.seed, int), "seed", "an integer or None", self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes) -> "SamplingParams":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return SamplingParams(**values)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check(ok: bool, name: str, allowed: str, got) -> None:
    if not ok:
        raise ValueError(f"SamplingParams.{name} must be {allowed}; got {got!r}")


@dataclass
class Sample:
    """One completion of one prompt, exactly as the engine sampled it."""

    token_ids: list[int]
    """Generated token ids (prompt excluded). A step's stop string, when hit, is inside them."""
    logprobs: list[float]
    """Behaviour log-probability of each sampled token under the model's raw (temperature 1,
    untruncated) distribution; the learner computes the same quantity, so ratios start at 1."""
    text: str
    """`tokenizer.decode(token_ids)`: text is derived from ids, never the other way round."""
    finish_reason: FinishReason
    """"stop": end-of-sequence; "step": a stop string; "length": max_tokens reached."""

    def to_dict(self) -> dict:
        return {"token_ids": self.token_ids, "logprobs": self.logprobs, "text": self.text,
                "finish_reason": self.finish_reason}


class Counters:
    """A dataclass of numeric fields that adds and subtracts field by field, like numbers: the compute
    counters here and in `planner/budget.py` (`Spend`, `ComputeRecord`)."""

    def _values(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __add__(self, other):
        return type(self)(**{name: value + getattr(other, name) for name, value in self._values().items()})

    def __sub__(self, other):
        return type(self)(**{name: value - getattr(other, name) for name, value in self._values().items()})

    def copy(self):
        return type(self)(**self._values())

    def to_dict(self) -> dict:
        return self._values()


@dataclass
class ComputeStats(Counters):
    """Running counters of what a policy (or a scorer) has spent. Add and subtract like numbers."""

    prompt_tokens: int = 0
    """Prompt tokens sent to the model, counted once per sample group (a prompt with n=8 counts once)."""
    cached_prompt_tokens: int = 0
    """Of those, tokens served from the prefix cache instead of being recomputed."""
    generated_tokens: int = 0
    calls: int = 0
    seconds: float = 0.0

    @property
    def cache_hit_fraction(self) -> float:
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
