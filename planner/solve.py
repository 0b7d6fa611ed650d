"""`planner.solve`: one problem in, the answer, the whole search tree and its compute out.

    solution = planner.solve("What is 2+3?", policy, strategy="mcts", budget=2000, num_simulations=32)
    solution.answer, solution.text, solution.tree, solution.compute.flops

`problem` is a string (wrapped in the tokenizer's chat template when it has one, unless
`chat=False`) or a task problem with a `question` attribute. Keyword options beyond the named
ones go to the strategy's config dataclass (see `planner.strategies.CONFIGS`). With
`scorer=None`, beam, DVTS and MCTS use the Monte-Carlo majority-agreement scorer (no reference
answer needed), rolling out to the end of the response.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.budget import Budget, ComputeRecord, as_budget
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
                budget: Budget | int | None = None, *, seed: int = 0, **options) -> list[Solution]:
    """`solve` for each problem in order, with seeds `seed, seed + 1, ...`; the budget is per problem.

    Problems are searched one after another: each strategy already batches its own generate calls.
    """
    return [solve(p, policy, strategy, scorer, budget, seed=seed + i, **options) for i, p in enumerate(problems)]
