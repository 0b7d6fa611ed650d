"""`planner.solve`: one problem in, the answer, the whole search tree and its compute out.

    solution = planner.solve("What is 2+3?", policy, strategy="mcts", budget=2000, num_simulations=32)
    solution.answer, solution.text, solution.tree, solution.compute.flops

`problem` is a string (wrapped in the tokenizer's chat template when it has one, unless
`chat=False`) or a task problem with a `question` attribute. Keyword options beyond the named
ones go to the strategy's config dataclass (see `planner.strategies.CONFIGS`). With
`scorer=None`, beam, DVTS and MCTS use the Monte-Carlo majority-agreement scorer (no reference
answer needed), rolling out to the end of the response.

`solve_batch(problems, policy, ...)` searches many problems together and merges their generate
calls and their model scorer's calls (`planner.scheduler.run_interleaved`), so the engine sees one
large batch per round instead of one problem's worth; with `max_live=K` it keeps K searches live
out of a longer list, a finished search's slot going at once to the next problem.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from planner.budget import Budget, ComputeRecord, as_budget
from planner.scheduler import run_interleaved, scorer_for_search
from planner.monte_carlo import MonteCarloScorer
from planner.scorers import Scorer
from planner.strategies import NEEDS_SCORER, STRATEGIES, make_config
from planner.tree import SearchTree

__all__ = ["Solution", "solve", "solve_batch", "prompt_ids_for", "check_prompt_fits"]


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


def check_prompt_fits(prompt_ids: Sequence[int], policy, which: str = "the prompt") -> None:
    """Raise one clear ValueError when `prompt_ids` leave no room to generate in the policy's context
    (`Policy.context_length`; nothing is checked when it is unknown). Past its context a model runs on
    positions it never saw, slowly and to no use, so this is refused before any search starts."""
    context = getattr(policy, "context_length", None)
    if context is not None and len(prompt_ids) >= context:
        raise ValueError(f"{which} is {len(prompt_ids)} tokens but the model's context is {context} tokens "
                         f"({policy.model_path}), which leaves no room to generate: shorten the problem (or the "
                         "system prompt), or use a model with a longer context (vLLM: a larger max_model_len)")


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
    check_prompt_fits(prompt_ids, policy)
    result = STRATEGIES[strategy](prompt_ids, policy, scorer, as_budget(budget), settings, seed)
    return Solution(answer=result.answer, text=result.text, tree=result.tree, compute=result.compute,
                    strategy=strategy, leaf=result.leaf)


def solve_batch(problems: Sequence, policy, strategy: str = "mcts", scorer: Scorer | None = None,
                budget: Budget | int | None = None, *, seed: int = 0, batched: bool = True,
                max_live: int | None = None, **options) -> list[Solution]:
    """`solve` for each problem, with seeds `seed, seed + 1, ...`; the budget is per problem.

    batched=True (the default) keeps the engine full: the searches advance together, and each round
    their generate calls are merged into one engine call per sampling shape (same max_tokens,
    stop, ...), so a beam or MCTS round over 8 problems is one call with 8 times the prompts.
    Each search still sees only its own samples and its own compute (`Solution.compute`): prompt
    and generated tokens exactly, prompt-cache hits shared out in proportion to prompt tokens
    (`planner.scheduler.SearchView`). Results are deterministic but differ from solving the problems one
    by one (a merged call draws from one seed derived from the searches' seeds). A `scorer` passed
    in is copied per search (`planner.scheduler.scorer_for_search`): each copy counts only its own search's scoring
    (calls, tokens, FLOPs), a model scorer (`ModelScorer`, the learner's `ValueCritic`) scores all
    searches' prefixes of a round in one batched forward, and a Monte-Carlo scorer over `policy` rolls
    out through the search's view of the engine, so its rollouts join the merged calls and count in
    that search's generated tokens. Each search's `budget` is its own ceiling, whatever it is merged with.

    max_live: the most searches live at once (None: all problems). With fewer, the problems start in
    order and a search that ends hands its slot to the next problem at once (continuous refilling):
    the merged calls stay near `max_live` searches' worth instead of thinning out as searches end.
    A search's samples depend on which searches share its calls, so another `max_live` gives other
    trees (the same ones when samples depend on the prompt alone; see `planner.scheduler`).
    With batched=False the problems are searched one after another, exactly as `solve` would.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}; got {strategy!r}")
    for i, problem in enumerate(problems):  # every prompt fits, before any search starts
        check_prompt_fits(prompt_ids_for(problem, policy, chat=options.get("chat", True), system=options.get("system")),
                          policy, f"problem {i}'s prompt")
    if not batched or len(problems) < 2:
        return [solve(p, policy, strategy, scorer, budget, seed=seed + i, **options)
                for i, p in enumerate(problems)]
    jobs = [functools.partial(_solve_on, problem=p, strategy=strategy, scorer=scorer, budget=budget,
                              seed=seed + i, options=options) for i, p in enumerate(problems)]
    return run_interleaved(jobs, policy, max_live=max_live)


def _solve_on(view, *, problem, strategy, scorer, budget, seed, options) -> Solution:
    scorer = scorer_for_search(scorer, view) if scorer is not None else None
    return solve(problem, view, strategy, scorer, budget, seed=seed, **options)
