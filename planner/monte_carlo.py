"""The Monte-Carlo scorer: a prefix valued by rollouts the policy samples from it (Math-Shepherd, Wang et
al. 2024; the rollout evaluation of TS-LLM and rStar), the default scorer of beam, DVTS and MCTS.
The contract is planner/scorers.py's."""

from __future__ import annotations

import numpy as np

from planner.answers import Equivalent, Extract, default_extract, default_verify, same_answer
from planner.budget import Spend, largest
from planner.policy.types import SamplingParams
from planner.scorers import Scorer, _response

__all__ = ["MonteCarloScorer"]


class MonteCarloScorer(Scorer):
    """Value of a prefix from `rollouts` completions sampled by the policy (Math-Shepherd,
    Wang et al. 2024; the rollout evaluation of TS-LLM / rStar).

    With a `reference` answer (training only, `is_oracle`): the fraction of rollouts whose extracted
    answer verifies against it. Without one (the default scorer of beam, DVTS and MCTS): the fraction
    of rollouts whose answer agrees with the majority answer among them (self-consistency, Wang
    et al. 2022); rollouts without an answer never agree. A finished prefix is not rolled out: it is
    scored by its own answer, against the reference, or else by the fraction of `rollouts` samples
    from the prompt that agree with it (drawn once per prompt per search). All rollouts of one call
    are sampled in one `policy.generate`; they count in the policy's stats, so `num_parameters = 0`.
Searches run together over `policy` (`planner.scheduler.scorer_for_search`) roll out through their own
view of it, so their rollouts join the merged engine calls.

    Under a budget (`score(..., affordable=...)`) a call that cannot afford `rollouts` samples of
    `max_tokens` each uses fewer rollouts per prefix, then (with one) shorter ones; the least is one
    1-token rollout per prefix. Prompt rollouts drawn smaller than the full size are not kept for reuse.
    """

    def __init__(self, policy, *, rollouts: int = 4, max_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 1.0, reference: str | None = None, extract: Extract | None = None,
                 equivalent: Equivalent | None = None, seed: int = 0) -> None:
        super().__init__()
        self.policy, self.reference = policy, reference
        self.params = SamplingParams(n=rollouts, temperature=temperature, top_p=top_p, max_tokens=max_tokens)
        self._call_params = self.params  # this call's rollouts (see `_fit`)
        self.extract = extract or default_extract
        self.equivalent = equivalent or (default_verify if reference is not None else same_answer)
        self.is_oracle = reference is not None
        self.reset(seed)

    def reset(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self._prompt_answers: dict[tuple[int, ...], list[str | None]] = {}

    def least_spend(self, lengths, finished, prompt):
        """Worst case of one 1-token rollout per prefix that may be unfinished, plus one from the prompt
        when a finished prefix may need the prompt's rollouts (not drawn yet, no reference)."""
        unsure = [length for length, done in zip(lengths, finished) if done is not True]
        pool = (self.reference is None and any(done is not False for done in finished)
                and tuple(prompt) not in self._prompt_answers)
        extra = pool and any(done is True for done in finished)  # otherwise a pool replaces an unsure rollout
        return super().least_spend(lengths, finished, prompt) + Spend(
            generated_tokens=len(unsure) + extra, prompt_tokens=sum(unsure) + (len(prompt) if pool else 0))

    def _pools(self, prefixes, prompt_len, finished) -> list[list[int]]:
        """Prompts whose own rollouts judge finished responses (no reference), not drawn yet."""
        if self.reference is None and any(finished):
            if prompt_len is None:
                raise ValueError("MonteCarloScorer needs prompt_len to score finished responses without a reference")
            return list({tuple(p[:prompt_len]): p[:prompt_len] for p, done in zip(prefixes, finished)
                         if done and tuple(p[:prompt_len]) not in self._prompt_answers}.values())
        return []

    def _fit(self, prefixes, prompt_len, finished, affordable):
        """The most rollouts (then the longest) per prefix that `affordable` allows, for this call."""
        unfinished = [len(p) for p, done in zip(prefixes, finished) if not done]
        pools = self._pools(prefixes, prompt_len, finished)
        prompts, computed = len(unfinished) + len(pools), sum(unfinished) + sum(map(len, pools))
        scored = sum(len(p) for p in prefixes)

        def fits(rollouts: int, max_tokens: int) -> bool:
            return affordable(Spend(generated_tokens=prompts * rollouts * max_tokens, prompt_tokens=computed,
                                    scorer_tokens=scored))

        full = self._call_params = self.params
        if affordable is None or not prompts or fits(full.n, full.max_tokens):
            return
        rollouts = largest(1, full.n, lambda r: fits(r, full.max_tokens))
        if rollouts is not None:
            self._call_params = full.replace(n=rollouts)
            return
        shorter = largest(1, full.max_tokens, lambda t: fits(1, t))
        if shorter is None:
            raise ValueError(f"MonteCarloScorer cannot score {len(prefixes)} prefixes within what the budget has "
                             "left: not even one 1-token rollout per prefix fits; size the round with "
                             "planner.strategies.fitting.fit_round, which reserves the scoring")
        self._call_params = full.replace(n=1, max_tokens=shorter)

    def _score(self, prefixes, prompt_len, finished):
        unfinished = [p for p, done in zip(prefixes, finished) if not done]
        prompt_pools = self._pools(prefixes, prompt_len, finished)
        answers_of: list[list[str | None]] = []
        pools: dict[tuple[int, ...], list[str | None]] = {}
        if unfinished or prompt_pools:
            params = self._call_params.replace(seed=int(self._rng.integers(2**31 - 1)))
            groups = self.policy.generate(unfinished + prompt_pools, params)
            for prefix, group in zip(unfinished, groups):
                head = self.policy.decode(_response(prefix, prompt_len))
                answers_of.append([self.extract(head + s.text) for s in group])
            for prompt, group in zip(prompt_pools, groups[len(unfinished):]):
                pools[tuple(prompt)] = [self.extract(s.text) for s in group]
            if self._call_params == self.params:  # only full-size prompt rollouts are kept for the search
                self._prompt_answers.update(pools)
        values, k = [], 0
        for prefix, done in zip(prefixes, finished):
            if done:
                answer = self.extract(self.policy.decode(_response(prefix, prompt_len)))
                if self.reference is not None:
                    values.append(float(answer is not None and self.equivalent(self.reference, answer)))
                else:
                    key = tuple(prefix[:prompt_len])
                    pool = pools[key] if key in pools else self._prompt_answers[key]
                    values.append(_agreement(answer, pool, self.equivalent))
            else:
                answers = answers_of[k]
                k += 1
                if self.reference is not None:
                    hits = [a is not None and self.equivalent(self.reference, a) for a in answers]
                    values.append(sum(hits) / len(answers))
                else:
                    values.append(max((_agreement(a, answers, self.equivalent) for a in answers), default=0.0))
        return values


def _agreement(answer: str | None, pool: list[str | None], equivalent: Equivalent) -> float:
    """Fraction of `pool` equivalent to `answer` (0 when `answer` is None or the pool is empty)."""
    if answer is None or not pool:
        return 0.0
    return sum(a is not None and equivalent(answer, a) for a in pool) / len(pool)
