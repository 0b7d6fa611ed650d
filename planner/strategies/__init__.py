"""Search strategies: one file each, one signature, one registry.

Every strategy is a function

    strategy(prompt_ids: list[int], policy: Policy, scorer: Scorer | None, budget: Budget | None,
             config: <its config dataclass>, seed: int) -> SearchResult

that builds one `SearchTree` from the prompt's token ids. `STRATEGIES` maps a name to the function
and `CONFIGS` the same name to its config dataclass (search-and-learn's registry of searches).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields

from planner.strategies.beam import BeamConfig, beam_search
from planner.strategies.best_of_n import BestOfNConfig, best_of_n
from planner.strategies.budget_forcing import BudgetForcingConfig, budget_forcing
from planner.strategies.common import SearchConfig, SearchResult, field_docs
from planner.strategies.dvts import DVTSConfig, dvts
from planner.strategies.mcts import MCTSConfig, mcts

__all__ = ["STRATEGIES", "CONFIGS", "NEEDS_SCORER", "Strategy", "SearchConfig", "SearchResult",
           "BestOfNConfig", "BeamConfig", "DVTSConfig", "MCTSConfig", "BudgetForcingConfig",
           "best_of_n", "beam_search", "dvts", "mcts", "budget_forcing", "make_config", "options_help"]

Strategy = Callable[..., SearchResult]
"""(prompt_ids, policy, scorer, budget, config, seed) -> SearchResult"""

STRATEGIES: dict[str, Strategy] = {
    "best_of_n": best_of_n,
    "beam": beam_search,
    "dvts": dvts,
    "mcts": mcts,
    "budget_forcing": budget_forcing,
}

CONFIGS: dict[str, type[SearchConfig]] = {
    "best_of_n": BestOfNConfig,
    "beam": BeamConfig,
    "dvts": DVTSConfig,
    "mcts": MCTSConfig,
    "budget_forcing": BudgetForcingConfig,
}

NEEDS_SCORER = frozenset({"beam", "dvts", "mcts"})
"""Strategies that cannot run without values; `planner.solve` gives them the Monte-Carlo scorer."""


def options_help(flag: str = "--set NAME=VALUE") -> str:
    """Every strategy and its config options (default and docstring), for the scripts' --help. Callable
    options (answer extraction, rewards) are set from the task's verifier, not the command line."""
    lines = [f"strategies and their options (set with {flag}):"]
    for name, cls in CONFIGS.items():
        lines.append(f"\n  {name} ({cls.__name__}): {(cls.__doc__ or '').strip()}")
        docs = field_docs(cls)
        for f in dataclass_fields(cls):
            if f.name in ("extract", "equivalent", "terminal_reward"):
                continue
            default = f.default if f.default is not MISSING else None
            lines.append(f"    {f.name}={default!r}: {docs.get(f.name, '')}")
    return "\n".join(lines)


def make_config(strategy: str, **fields) -> SearchConfig:
    """The strategy's config from keyword fields; unknown names raise, listing the allowed ones."""
    if strategy not in CONFIGS:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}; got {strategy!r}")
    cls = CONFIGS[strategy]
    allowed = sorted(cls.__dataclass_fields__)
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ValueError(f"{cls.__name__} has no option(s) {unknown}; allowed: {allowed}")
    return cls(**fields)
