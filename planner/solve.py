"""`planner.solve`: one problem in, the answer, the whole search tree and its compute out.

    solution = planner.solve("What is 2+3?", policy, strategy="mcts", budget=2000, num_simulations=32)
    solution.answer, solution.text, solution.tree, solution.compute.flops

`problem` is a string (wrapped in the tokenizer's chat template when it has one, unless
`chat=False`) or a task problem with a `question` attribute. Keyword options beyond the named
ones go to the strategy's config dataclass (see `planner.strategies.CONFIGS`). With
`scorer=None`, beam, DVTS and MCTS use the Monte-Carlo majority-agreement scorer (no reference
answer needed), rolling out to the end of the response.

`solve_batch(problems, policy, ...)` searches many problems together and merges their generate
calls, so the engine sees one large batch per round instead of one problem's worth.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.budget import Budget, ComputeRecord, as_budget
from planner.policy.types import ComputeStats, SamplingParams
from planner.scorers import MonteCarloScorer, Scorer
from planner.strategies import NEEDS_SCORER, STRATEGIES, make_config
from planner.tree import SearchTree

__all__ = ["Solution", "solve", "solve_batch", "prompt_ids_for"]


@dataclass
class Solution:
    """The result of `solve`."""

    answer: str | None
    """Extracted answer of the chosen response (None when none could be extracted)."""
    text: str
    """The chosen response, decoded from its token ids."""
    tree: SearchTree
    compute: ComputeRecord
    """generated / prompt / cached prompt tokens, policy and scorer calls, scorer tokens, FLOPs."""
    strategy: str
    leaf: int
    """Index of the chosen node in `tree`."""

    def to_dict(self, with_tree: bool = False) -> dict:
        out = {"answer": self.answer, "text": self.text, "strategy": self.strategy, "leaf": self.leaf,
               "compute": self.compute.to_dict()}
        if with_tree:
            out["tree"] = self.tree.to_dict()
        return out


def prompt_ids_for(problem, policy, chat: bool = True, system: str | None = None) -> list[int]:
    """Prompt token ids for a string or an object with a `question` attribute."""
    question = problem if isinstance(problem, str) else getattr(problem, "question", None)
    if not isinstance(question, str):
        raise TypeError("problem must be a string or have a string `question` attribute; "
                        f"got {type(problem).__name__}")
    return policy.encode_prompt(question, chat=chat, system=system)


def _default_scorer(policy, config) -> MonteCarloScorer:
    rollout_tokens = config.max_step_tokens * config.max_steps
    return MonteCarloScorer(policy, rollouts=4, max_tokens=rollout_tokens, temperature=config.temperature,
                            top_p=config.top_p, extract=config.extract, equivalent=config.equivalent)


def solve(problem, policy, strategy: str = "mcts", scorer: Scorer | None = None, budget: Budget | int | None = None,
          *, seed: int = 0, chat: bool = True, system: str | None = None, allow_oracle: bool = False,
          **config) -> Solution:
    """Search for an answer to `problem` with `strategy` (a name in `planner.strategies.STRATEGIES`).

    budget: a `Budget`, an integer (generated tokens) or None. allow_oracle: permit scorers or
    terminal rewards that read the reference answer (training only; refused otherwise).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}; got {strategy!r}")
    settings = make_config(strategy, **config)
    if not allow_oracle:
        if scorer is not None and getattr(scorer, "is_oracle", False):
            raise ValueError(f"{type(scorer).__name__} reads the reference answer (is_oracle); it is for training "
                             "only: pass allow_oracle=True to use it")
        if getattr(settings, "terminal_reward", None) is not None:
            raise ValueError("terminal_reward scores with the verifier (training only): pass allow_oracle=True")
    if scorer is None and strategy in NEEDS_SCORER:
        scorer = _default_scorer(policy, settings)
    prompt_ids = prompt_ids_for(problem, policy, chat=chat, system=system)
    result = STRATEGIES[strategy](prompt_ids, policy, scorer, as_budget(budget), settings, seed)
    return Solution(answer=result.answer, text=result.text, tree=result.tree, compute=result.compute,
                    strategy=strategy, leaf=result.leaf)


def solve_batch(problems: Sequence, policy, strategy: str = "mcts", scorer: Scorer | None = None,
                budget: Budget | int | None = None, *, seed: int = 0, batched: bool = True,
                **options) -> list[Solution]:
    """`solve` for each problem, with seeds `seed, seed + 1, ...`; the budget is per problem.

    batched=True (the default) keeps the engine full: the searches advance together, and each round
    their generate calls are merged into one engine call per sampling shape (same n, max_tokens,
    stop, ...), so a beam or MCTS round over 8 problems is one call with 8 times the prompts.
    Each search still sees only its own samples and its own compute (`Solution.compute`): prompt
    and generated tokens exactly, prompt-cache hits shared out in proportion to prompt tokens, and
    the merged call's seconds. Results are deterministic but differ from solving the problems one
    by one (a merged call draws from one seed derived from the searches' seeds). A `scorer` passed
    in is copied per search (`Scorer.for_search`): each copy counts only its own search's scoring,
    and a Monte-Carlo scorer over `policy` rolls out through the search's view of the engine, so its
    rollouts join the merged calls and count in that search's generated tokens. With batched=False
    the problems are searched one after another, exactly as `solve` would.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}; got {strategy!r}")
    if not batched or len(problems) < 2:
        return [solve(p, policy, strategy, scorer, budget, seed=seed + i, **options)
                for i, p in enumerate(problems)]
    jobs = [functools.partial(_solve_on, problem=p, strategy=strategy, scorer=scorer, budget=budget,
                              seed=seed + i, options=options) for i, p in enumerate(problems)]
    return run_interleaved(jobs, policy)


def _solve_on(view, *, problem, strategy, scorer, budget, seed, options) -> Solution:
    scorer = scorer.for_search(view) if scorer is not None else None
    return solve(problem, view, strategy, scorer, budget, seed=seed, **options)


class _PolicyView:
    """One search's handle on a shared policy: its own `stats`; `generate` waits for the merged call."""

    def __init__(self, engine: "_MergedCalls", index: int) -> None:
        self._engine, self._index = engine, index
        self.shared_policy = engine.policy
        """The engine this view serves from (`Scorer.for_search` rebinds rollout scorers to the view)."""
        self.stats = ComputeStats()

    def __getattr__(self, name):  # everything else (tokenizer, decode, num_parameters, ...) is the policy's
        return getattr(self._engine.policy, name)

    def generate(self, prompt_token_ids, params: SamplingParams):
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a planner.SamplingParams; got {type(params).__name__}")
        prompts = self._engine.policy._check_prompts(prompt_token_ids)  # bad input fails in its own search
        return self._engine.wait_for(self._index, prompts, params)


class _MergedCalls:
    """Runs jobs in threads one at a time (cooperatively: a job runs until it asks for samples or
    ends) and answers all pending requests with one generate call per sampling shape, in job order.
    The schedule depends on nothing but the jobs, so the outcome is deterministic."""

    def __init__(self, policy, count: int) -> None:
        self.policy = policy
        self.go = [threading.Event() for _ in range(count)]
        self.back = threading.Event()
        self.requests: list[tuple[list[list[int]], SamplingParams] | None] = [None] * count
        self.replies: list = [None] * count

    def wait_for(self, index: int, prompts, params):
        self.requests[index] = (prompts, params)
        self.back.set()
        self.go[index].wait()
        self.go[index].clear()
        reply, self.replies[index] = self.replies[index], None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def answer(self, waiting: list[int], views: list[_PolicyView]) -> None:
        shapes: dict[SamplingParams, list[int]] = {}
        for i in waiting:
            shapes.setdefault(self.requests[i][1].replace(seed=None), []).append(i)
        for shape, members in shapes.items():
            seeds = [self.requests[i][1].seed for i in members]
            seed = (None if any(s is None for s in seeds)
                    else int(np.random.SeedSequence(seeds).generate_state(1)[0]) % (2**31 - 1))
            prompts = [p for i in members for p in self.requests[i][0]]
            before = self.policy.stats.copy()
            try:
                groups = self.policy.generate(prompts, shape.replace(seed=seed))
            except Exception as error:  # noqa: BLE001 - every search in the call gets the error
                for i in members:
                    self.replies[i] = error
                continue
            spent = self.policy.stats - before
            start, shared_cached = 0, 0
            for k, i in enumerate(members):
                own = self.requests[i][0]
                mine = groups[start:start + len(own)]
                start += len(own)
                own_tokens = sum(len(p) for p in own)
                cached = (spent.cached_prompt_tokens - shared_cached if k == len(members) - 1 else
                          spent.cached_prompt_tokens * own_tokens // max(1, spent.prompt_tokens))
                shared_cached += cached
                views[i].stats += ComputeStats(
                    prompt_tokens=own_tokens, cached_prompt_tokens=cached, calls=1, seconds=spent.seconds,
                    generated_tokens=sum(len(s.token_ids) for g in mine for s in g))
                self.replies[i] = mine
        for i in waiting:
            self.requests[i] = None


def run_interleaved(jobs: Sequence[Callable], policy) -> list:
    """Run `job(policy_view)` for each job, merging their generate calls; results in job order.

    The first error any job raised is raised once all jobs have ended.
    """
    engine = _MergedCalls(policy, len(jobs))
    views = [_PolicyView(engine, i) for i in range(len(jobs))]
    results: list = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)
    done = [False] * len(jobs)

    def work(i: int) -> None:
        engine.go[i].wait()
        engine.go[i].clear()
        try:
            results[i] = jobs[i](views[i])
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            errors[i] = error
        finally:
            done[i] = True
            engine.back.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True, name=f"solve-{i}") for i in range(len(jobs))]
    for t in threads:
        t.start()
    live = list(range(len(jobs)))
    while live:
        for i in live:  # one at a time, in order: each runs until it asks for samples or ends
            engine.go[i].set()
            engine.back.wait()
            engine.back.clear()
        live = [i for i in live if not done[i]]
        if live:
            engine.answer(live, views)
    for t in threads:
        t.join()
    for error in errors:
        if error is not None:
            raise error
    return results
