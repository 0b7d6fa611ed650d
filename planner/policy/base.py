"""The one policy interface every strategy and learner talks to.

A backend implements `_generate` (and `load_weights`); input validation, compute accounting and
token/text helpers live here once, so both backends reject the same bad input with the same error.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from planner.policy.types import ComputeStats, Sample, SamplingParams

NamedTensors = Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


class Policy(ABC):
    """A causal language model that samples token ids. Results are always in input order."""

    backend: str
    model_path: str
    tokenizer: "transformers.PreTrainedTokenizerBase"  # noqa: F821
    num_parameters: int
    """Parameter count of the model, for FLOP estimates (2 x params x tokens per forward token)."""
    context_length: int | None = None
    """Most tokens (prompt + response) the model takes; None when unknown. `planner.solve` refuses a
    prompt that leaves no room to generate, before any search (a model runs past its trained positions
    otherwise, slowly and to no use: 100k characters to a 512-token model ran for minutes)."""

    def __init__(self, seed: int = 0) -> None:
        self.stats = ComputeStats()
        self._rng = np.random.default_rng(seed)

    # ---- the interface -------------------------------------------------------------------------
    def generate(self, prompt_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        """Sample `params.n` completions for each prompt; returns one list of samples per prompt."""
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a planner.SamplingParams; got {type(params).__name__}")
        prompts = self._check_prompts(prompt_token_ids)
        seed = params.seed if params.seed is not None else int(self._rng.integers(2**31 - 1))
        start = time.perf_counter()
        results, cached = self._generate(prompts, params, seed)
        self.stats.seconds += time.perf_counter() - start
        self.stats.calls += 1
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self.stats.cached_prompt_tokens += cached
        self.stats.generated_tokens += sum(len(s.token_ids) for group in results for s in group)
        return results

    @abstractmethod
    def _generate(self, prompts: list[list[int]], params: SamplingParams, seed: int) -> tuple[list[list[Sample]], int]:
        """Backend work: the samples, and how many prompt tokens came from the prefix cache."""

    @abstractmethod
    def load_weights(self, named_tensors: NamedTensors) -> None:
        """Replace the model's weights in place (no restart) and drop any cached KV."""

    def sleep(self) -> None:
        """Free the accelerator memory the engine holds while a learner shares its device (the vLLM
        backend on GPU); the next call wakes it. Default: nothing to free."""

    def wake_up(self) -> None:
        """Undo `sleep`. Default: nothing to do."""

    def close(self) -> None:
        """Free the engine. The policy is unusable afterwards."""

    # ---- helpers shared by strategies ----------------------------------------------------------
    @property
    def eos_token_ids(self) -> set[int]:
        ids = self.tokenizer.eos_token_id
        return set(ids) if isinstance(ids, list) else {ids} if ids is not None else set()

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (no special tokens added)."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_prompt(self, problem: str, chat: bool = True, system: str | None = None, prefill: str = "") -> list[int]:
        """Prompt ids for a problem: the tokenizer's chat template when it has one (and `chat`), with
        `system` as the system message (None: none, or the template's own default, as Qwen2.5 adds), then
        `prefill`, text that opens the assistant's turn (e.g. "Let's think step by step."): it belongs to
        the prompt, so the response the engine samples continues it."""
        if chat and getattr(self.tokenizer, "chat_template", None):
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": problem}]
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):  # BatchEncoding in transformers 5
                ids = ids["input_ids"]
        else:
            ids = self.tokenizer.encode(problem, add_special_tokens=True)
        return list(ids) + (self.encode(prefill) if prefill else [])

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    def _check_prompts(self, prompt_token_ids) -> list[list[int]]:
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise TypeError("prompt_token_ids must be a list of token-id lists, e.g. [policy.encode('2+2=')]; "
                            f"got {type(prompt_token_ids).__name__}")
        if len(prompt_token_ids) == 0:
            raise ValueError("prompt_token_ids is empty: pass at least one prompt (a list of token ids)")
        vocab = len(self.tokenizer)
        prompts = []
        for i, p in enumerate(prompt_token_ids):
            if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or len(p) == 0:
                raise ValueError(f"prompt {i} must be a non-empty list of token ids; got {p!r:.80}")
            ids = [int(t) for t in p]
            if min(ids) < 0 or max(ids) >= vocab:
                raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab}): "
                                 f"min {min(ids)}, max {max(ids)}")
            prompts.append(ids)
        return prompts
