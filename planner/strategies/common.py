"""What every strategy shares: the config base, the result type, and the search phases.

The phases follow mctx's split (`simulate` -> `expand` -> `backward`): `expand` samples steps for a
batch of nodes in one `policy.generate` call and adds them to the tree with the engine's token ids
unchanged; `evaluate` scores a batch of nodes in one scorer call; `backup` adds a value to a node
and its ancestors. A strategy (one file each) is the loop that combines them.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from planner.answers import default_extract, same_answer, vote
from planner.budget import ComputeMeter, ComputeRecord
from planner.policy.types import SamplingParams
from planner.tree import NO_PARENT, ROOT, SearchTree

__all__ = ["SearchConfig", "SearchResult", "Seeds", "expand", "complete", "evaluate", "backup", "choose_answer",
           "check_choice", "check_int", "check_number", "start_search", "finish_search", "config_dict", "field_docs"]


def check_choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name} must be one of {sorted(allowed)}; got {value!r}")


def check_int(owner: str, name: str, value, low: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{owner}.{name} must be an integer >= {low}; got {value!r}")


def check_number(owner: str, name: str, value, low: float, high: float = float("inf"), *,
                 optional: bool = False) -> None:
    if optional and value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
    if not ok:
        raise ValueError(f"{owner}.{name} must be a number in [{low}, {high}]"
                         f"{' or None' if optional else ''}; got {value!r}")


@dataclass
class SearchConfig:
    """Settings every strategy has. Each strategy's config dataclass extends it."""

    temperature: float = 0.8
    """Sampling temperature of the policy (search-and-learn uses 0.8)."""
    top_p: float = 1.0
    """Nucleus sampling mass (Holtzman et al. 2020)."""
    extract: Callable[[str], str | None] | None = None
    """Answer extraction from a response's text; None means `verifiers.math.extract_answer`."""
    equivalent: Callable[[str, str], bool] | None = None
    """Whether two extracted answers are the same, for voting; None means equal after stripping."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        check_number(name, "temperature", self.temperature, 0.0)
        check_number(name, "top_p", self.top_p, 1e-9, 1.0)

    def sampling(self, n: int, max_tokens: int, stop: Sequence[str] = ()) -> SamplingParams:
        return SamplingParams(n=n, temperature=self.temperature, top_p=self.top_p, max_tokens=max_tokens,
                              stop=tuple(stop))


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (CleanRL style), read from the source of `cls` and its bases."""

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError):
            continue
        for stmt, after in zip(body, body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                docs[stmt.target.id] = " ".join(after.value.value.split())
    return docs


def config_dict(config) -> dict:
    """The config's plain fields (callables named, not serialised), for a tree's `meta`."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        out[f.name] = getattr(value, "__name__", repr(value)) if callable(value) else value
    return out


@dataclass
class SearchResult:
    """What a strategy returns."""

    tree: SearchTree
    answer: str | None
    """Extracted answer of the chosen response (None when no answer could be extracted)."""
    text: str
    """The chosen response's text (decoded from its token ids)."""
    compute: ComputeRecord
    leaf: int
    """Index of the chosen node in `tree`."""


class Seeds:
    """A stream of per-call seeds from one search seed, so one seed gives one tree."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def next(self) -> int:
        return int(self._rng.integers(2**31 - 1))


def start_search(prompt_ids, policy, scorer, budget, config, seed: int, strategy: str):
    """The setup every strategy shares: the tree, the meter and the seed stream."""
    if scorer is not None:
        scorer.reset(seed)
    tree = SearchTree.new(prompt_ids, policy.decode(prompt_ids), strategy=strategy, seed=seed,
                          config=config_dict(config))
    return tree, ComputeMeter(policy, scorer, budget), Seeds(seed)


def expand(tree: SearchTree, nodes: Sequence[int], policy, params: SamplingParams, seed: int,
           max_depth: int | None = None) -> list[list[int]]:
    """Sample `params.n` steps below each node in one generate call; return the new children per node.

    A child's ids are the engine's sampled ids, unchanged. A child is terminal when it ended with
    end-of-sequence or reached `max_depth` steps.
    """
    if not nodes:
        return []
    groups = policy.generate([tree.prefix_ids(n) for n in nodes], params.replace(seed=seed))
    children = []
    for node, group in zip(nodes, groups):
        depth = tree[node].depth + 1
        children.append([tree.add_child(node, s.token_ids, s.logprobs, s.text, s.finish_reason,
                                        terminal=s.finish_reason == "stop" or (max_depth is not None
                                                                               and depth >= max_depth))
                         for s in group])
    return children


def complete(tree: SearchTree, nodes: Sequence[int], policy, params: SamplingParams, seed: int) -> list[int]:
    """Finish the response below each node with one sample to the end (no step delimiter) and mark it
    terminal; returns the new nodes. Used when a search stops at unfinished nodes: MCTS's chosen node
    after a small budget, and the learner's rollouts of every unfinished leaf (TreeRL-style)."""
    groups = expand(tree, list(nodes), policy, params.replace(n=1, stop=()), seed)
    for group in groups:
        for child in group:
            tree[child].terminal = True
    return [group[0] for group in groups]


def evaluate(tree: SearchTree, nodes: Sequence[int], scorer, terminal_reward: Callable[[str], float] | None = None,
             meter: ComputeMeter | None = None) -> list[float]:
    """Score nodes in one scorer call and store `node.score`; returns the values.

    With `terminal_reward` (training only), terminal nodes also get `node.reward` from it, and that
    reward is their value. With a `meter`, the scoring fits in what its budget has left.
    """
    if not nodes:
        return []
    values = scorer.score([tree.prefix_ids(n) for n in nodes], prompt_len=len(tree.prompt_ids),
                          finished=[tree[n].terminal for n in nodes],
                          affordable=meter.affords if meter is not None else None,
                          step_logprobs=[tree[n].logprobs for n in nodes])
    for n, v in zip(nodes, values):
        tree[n].score = v
    if terminal_reward is not None:
        for k, n in enumerate(nodes):
            if tree[n].terminal:
                tree[n].reward = float(terminal_reward(tree.response_text(n)))
                values[k] = tree[n].reward
    return values


def backup(tree: SearchTree, node: int, value: float) -> None:
    """Add one visit with `value` to `node` and every ancestor (Monte-Carlo mean backup)."""
    while node != NO_PARENT:
        tree[node].visits += 1
        tree[node].value_sum += value
        node = tree[node].parent


def choose_answer(tree: SearchTree, candidates: Sequence[int], rule: str, weights: Sequence[float] | None,
                  config: SearchConfig) -> tuple[int, str | None]:
    """Vote among candidate nodes by their extracted answers; returns (chosen node, its answer)."""
    if not candidates:
        return ROOT, None
    extract = config.extract or default_extract
    answers = [extract(tree.response_text(n)) for n in candidates]
    k = vote(rule, answers, weights, config.equivalent or same_answer)
    return candidates[k], answers[k]


def finish_search(tree: SearchTree, meter: ComputeMeter, leaf: int, answer: str | None) -> SearchResult:
    tree.meta["chosen"] = leaf
    return SearchResult(tree=tree, answer=answer, text=tree.response_text(leaf), compute=meter.record(), leaf=leaf)
