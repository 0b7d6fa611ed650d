"""Budget forcing (s1; Muennighoff et al. 2025): control how long the model thinks.

Each of `n` samples thinks until it emits the end-of-thinking string (or EOS):
- below `min_thinking_tokens`, the end is suppressed (its tokens are dropped from the sample) and
  the ids of `wait_text` (encoded once) are appended, and thinking continues;
- at `max_thinking_tokens`, thinking is closed by appending the ids of `end_of_thinking +
  answer_prefix`, and the answer is generated (at most `max_answer_tokens`).
A sample that closes its thinking itself at or above the minimum goes on to its answer; one that
ends with EOS there is finished. Thinking length counts the thinking ids after the prompt ("Wait"s
included, the end-of-thinking string itself not).

Each sample is a chain in the tree: sampled segments alternate with forced nodes (`forced=True`,
log-probabilities 0.0, masked out of the learner's loss). Kept ids are always a prefix of what the
engine sampled. All samples in the same phase with the same remaining allowance share one generate
call. With n > 1 this is best-of-N with forcing: the answer is voted by `final`.

Under a compute budget (see `planner/budget.py`) each thinking call is sized so that every
unfinished sample's answer (`max_answer_tokens`) and the final scoring still fit in what is left:
the budget then acts as the thinking maximum. A thinking sample cut short by it is closed like one
that reached `max_thinking_tokens`, and when no thinking call fits at all, every thinking sample is
closed and answers (unless not even a 1-token answer fits). An answer call that does not fit even
shrunk ends the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.budget import Spend
from planner.strategies.common import (SearchConfig, SearchResult, check_choice, check_int, choose_answer,
                                       evaluate, finish_search, start_search)
from planner.strategies.fitting import fit_round, round_spend
from planner.tree import ROOT, SearchTree

__all__ = ["BudgetForcingConfig", "budget_forcing"]


@dataclass
class BudgetForcingConfig(SearchConfig):
    """s1 budget forcing (Muennighoff et al. 2025)."""

    n: int = 1
    """Samples, each forced independently (best-of-N on top of forcing)."""
    min_thinking_tokens: int = 128
    """Below this many thinking tokens an end of thinking is replaced by `wait_text`."""
    max_thinking_tokens: int = 512
    """At this many thinking tokens the thinking is closed and the answer requested."""
    max_answer_tokens: int = 64
    """Most tokens of the answer after the thinking."""
    end_of_thinking: str = "</think>"
    """The string that ends thinking (R1 / s1 / Qwen3 style)."""
    wait_text: str = "Wait"
    """Appended when an end of thinking is suppressed (s1 uses "Wait")."""
    answer_prefix: str = "\nFinal Answer:"
    """Appended after `end_of_thinking` when thinking is closed by force, to ask for the answer."""
    final: Literal["majority", "weighted", "best"] = "majority"
    """How to pick among the n samples ("weighted" and "best" need a scorer)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("n", "min_thinking_tokens", "max_thinking_tokens", "max_answer_tokens"):
            check_int("BudgetForcingConfig", name, getattr(self, name), 0 if name == "min_thinking_tokens" else 1)
        if self.min_thinking_tokens > self.max_thinking_tokens:
            raise ValueError("BudgetForcingConfig.min_thinking_tokens must be <= max_thinking_tokens="
                             f"{self.max_thinking_tokens}; got {self.min_thinking_tokens}")
        for name in ("end_of_thinking", "wait_text"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"BudgetForcingConfig.{name} must be a non-empty string; got {getattr(self, name)!r}")
        check_choice("BudgetForcingConfig", "final", self.final, {"majority", "weighted", "best"})


@dataclass
class _Thread:
    """One forced sample: where its chain ends, how long it has thought, and what happened."""

    head: int = ROOT
    thinking: int = 0
    phase: Literal["think", "answer", "done"] = "think"
    waits: int = 0
    closed_by_force: bool = False
    segments: list[int] = field(default_factory=list)


def _strip_end(policy, ids: list[int], end: str, finish_reason: str) -> list[int]:
    """The sampled ids without the end-of-thinking string (or EOS) that ended them: a prefix of `ids`."""
    if finish_reason == "stop":
        return ids[:-1] if ids and ids[-1] in policy.eos_token_ids else ids
    cut = policy.decode(ids).rfind(end)
    if cut < 0:
        return list(ids)
    kept = list(ids)
    while kept and len(policy.decode(kept)) > cut:
        kept.pop()
    return kept


def _append(tree: SearchTree, thread: _Thread, ids, logprobs, policy, finish_reason, *, forced=False,
            terminal=False) -> None:
    if ids or terminal:
        thread.head = tree.add_child(thread.head, ids, logprobs, policy.decode(ids), finish_reason,
                                     terminal=terminal, forced=forced)
        thread.segments.append(thread.head)


def budget_forcing(prompt_ids, policy, scorer, budget, config: BudgetForcingConfig, seed: int) -> SearchResult:
    if config.final != "majority" and scorer is None:
        raise ValueError(f"budget_forcing with final={config.final!r} needs a scorer")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "budget_forcing")
    wait_ids = policy.encode(config.wait_text)  # encoded once; appended as ids
    close_ids = policy.encode(config.end_of_thinking + config.answer_prefix)
    threads = [_Thread() for _ in range(config.n)]
    growth = len(wait_ids) + len(close_ids)  # most forced ids a thread may still get before its answer

    def promised(answers: bool) -> Spend:
        """Later work a call must leave room for: the unfinished threads' answers (when `answers`) and
        the final scoring of every thread's last node."""
        final, promise = [], Spend()
        for t in threads:
            length = len(tree.prefix_ids(t.head))
            if t.phase == "think":
                length += config.max_thinking_tokens - t.thinking + growth
            if t.phase != "done" and answers:
                promise += Spend(generated_tokens=config.max_answer_tokens, prompt_tokens=length)
            final.append(length + (config.max_answer_tokens if t.phase != "done" else 0))
        if scorer is not None:
            flags = [True if t.phase == "done" else None for t in threads]
            promise += scorer.least_spend(final, flags, tree.prompt_ids)
        return promise

    while any(t.phase != "done" for t in threads):
        thinking = [t for t in threads if t.phase == "think"]
        if thinking:  # one call for the threads with the smallest remaining allowance
            remaining = min(config.max_thinking_tokens - t.thinking for t in thinking)
            batch = [t for t in thinking if config.max_thinking_tokens - t.thinking == remaining]
            params = config.sampling(n=1, max_tokens=remaining, stop=(config.end_of_thinking,))
            fitted = fit_round(meter, tree, [t.head for t in batch], params, reserve=promised(answers=True))
            if fitted is None:  # no thinking fits any more: every thinking thread answers now, if one can
                first = len(tree.prefix_ids(thinking[0].head)) + len(close_ids)
                if not meter.affords(round_spend([first], 1, 1) + promised(answers=False)):
                    break
                for thread in thinking:
                    _append(tree, thread, close_ids, [0.0] * len(close_ids), policy, None, forced=True)
                    thread.phase, thread.closed_by_force = "answer", True
                continue
        else:
            batch = [t for t in threads if t.phase == "answer"]
            params = config.sampling(n=1, max_tokens=config.max_answer_tokens)
            fitted = fit_round(meter, tree, [t.head for t in batch], params, reserve=promised(answers=False))
            if fitted is None:
                break
        batch, params = batch[:len(fitted[0])], fitted[1]
        groups = policy.generate([tree.prefix_ids(t.head) for t in batch], params.replace(seed=seeds.next()))
        for thread, (sample,) in zip(batch, groups):
            if thread.phase == "answer":
                _append(tree, thread, sample.token_ids, sample.logprobs, policy, sample.finish_reason, terminal=True)
                thread.phase = "done"
            elif sample.finish_reason == "length":  # the maximum: close the thinking, ask for the answer
                _append(tree, thread, sample.token_ids, sample.logprobs, policy, "length")
                _append(tree, thread, close_ids, [0.0] * len(close_ids), policy, None, forced=True)
                thread.thinking += len(sample.token_ids)
                thread.phase, thread.closed_by_force = "answer", True
            else:
                kept = _strip_end(policy, sample.token_ids, config.end_of_thinking, sample.finish_reason)
                if thread.thinking + len(kept) < config.min_thinking_tokens:  # too early: "Wait"
                    _append(tree, thread, kept, sample.logprobs[:len(kept)], policy, sample.finish_reason)
                    _append(tree, thread, wait_ids, [0.0] * len(wait_ids), policy, None, forced=True)
                    thread.thinking += len(kept) + len(wait_ids)
                    thread.waits += 1
                    if thread.thinking >= config.max_thinking_tokens:
                        _append(tree, thread, close_ids, [0.0] * len(close_ids), policy, None, forced=True)
                        thread.phase, thread.closed_by_force = "answer", True
                else:  # ended on its own past the minimum: keep the end, go on to the answer (or stop at EOS)
                    done = sample.finish_reason == "stop"
                    _append(tree, thread, sample.token_ids, sample.logprobs, policy, sample.finish_reason,
                            terminal=done)
                    thread.thinking += len(kept)
                    thread.phase = "done" if done else "answer"
    tree.meta["forcing"] = [{"waits": t.waits, "thinking_tokens": t.thinking, "closed_by_force": t.closed_by_force,
                             "phase": t.phase, "nodes": t.segments} for t in threads]
    candidates = [t.head for t in threads if t.head != ROOT]
    weights = evaluate(tree, candidates, scorer, meter=meter) if scorer is not None and candidates else None
    leaf, answer = choose_answer(tree, candidates, config.final, weights, config)
    return finish_search(tree, meter, leaf, answer)
