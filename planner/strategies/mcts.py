"""Monte-Carlo tree search over steps with PUCT (AlphaZero, Silver et al. 2018; TS-LLM, Feng et al.
2023; rStar, Guan et al. 2025).

One round, batched so the policy stays busy:
1. **select** `leaves_per_round` leaves from the search start (the root, or after a reset the best
   visited node), each by descending with PUCT
       score(c) = Q(c) + c_puct * P(c) * sqrt(N(parent)) / (1 + N(c)),
   where N and Q include a virtual loss: every selection in flight counts as one visit of value 0,
   so the next selection of the round prefers other branches. A node is a leaf when it is terminal,
   has no (unpruned) children, or may widen: progressive widening (Coulom 2007; Chaslot et al. 2008)
   allows `num_candidates * max(1, floor(widening_c * N ** widening_alpha))` children
   (`widening_c = 0` turns widening off). Within a round a node already chosen for expansion
   counts its `num_candidates` coming children (a virtual expansion, like the virtual loss), so
   the round's other selections descend into its existing children instead of choosing it again:
   with widening on, a round expands up to `leaves_per_round` distinct leaves (one large generate
   call) rather than re-selecting the widening root. A selection that still reaches a leaf chosen
   earlier in the round (one with no children yet to descend into: every selection of the first
   round reaches the bare root) asks for `num_candidates` more steps below it instead of being
   wasted, so the first round expands the root with `leaves_per_round * num_candidates` steps.
2. **expand** every unfinished leaf with `num_candidates` sampled steps per selection that reached
   it, all in one generate call (n = num_candidates; the leaf's prompt repeated per selection).
   Priors are the softmax over siblings of each step's mean token log-probability divided by
   `prior_temperature` (length-normalised so long steps are not penalised), recomputed over all
   siblings after widening.
3. **evaluate** the new children in one scorer call (terminal ones by `terminal_reward` instead,
   when given: training only).
4. **backup**: each new child gets one visit with its value, and so does each of its ancestors
   (so a node's N is 1 + the sum of its children's N, the root's just the sum, and Q is the mean of
   every value evaluated below).

A selection that reaches a terminal leaf is not expanded: its value (reward, else score) is backed
up again at once, with no virtual loss, and the round selects again. So a round keeps selecting
until it holds `leaves_per_round` leaves to expand, and every generate call holds `leaves_per_round`
leaves (the engine's throughput falls with the rows per call: on vLLM/CPU a call of 2 leaves of 4
made about 60% of a full call's tokens per second). A round starts while fewer than
`num_simulations` selections have been made and is filled like the others, so the last round may
make up to `leaves_per_round - 1` more (a round stops at that many even when it found fewer leaves:
a finished tree). With `leaves_per_round = 1` this is plain sequential MCTS.

Each selection counts as one simulation.
The answer is the terminal node reached by following the most-visited child from the root
("visits"), or the terminal node of highest Q ("value"). When the search ends before the chosen
path finishes, its last node is completed with one sample to the end (counted in the compute).
Under a budget (see `planner/budget.py`) each round is sized to what is left: fewer candidates per
leaf, then fewer leaves (the first selected are kept; a selection whose leaf is dropped is not
counted), then shorter steps; a round that cannot fit ends the search. The final completion gets
at most what is left (none when nothing is: the answer is then read from the unfinished path).
Early termination (`prune_below`): a new child whose value is below the threshold is pruned (and a
node whose children are all pruned), and selection restarts from the best visited node.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from planner.answers import default_extract
from planner.strategies.common import (SearchResult, backup, check_choice, check_int, check_number, evaluate,
                                       complete, expand, finish_search, start_search)
from planner.strategies.fitting import fit_round
from planner.strategies.stepwise import StepConfig, best_visited_node
from planner.tree import NO_PARENT, ROOT, SearchTree

__all__ = ["MCTSConfig", "mcts", "select", "puct_score", "set_priors", "can_widen", "final_node"]


@dataclass
class MCTSConfig(StepConfig):
    """MCTS with PUCT and progressive widening."""

    num_simulations: int = 16
    """Selections in total (each expands one leaf or revisits a terminal one). The last round is filled
    like the others, so a search may make up to `leaves_per_round - 1` more."""
    leaves_per_round: int = 4
    """Selections per round, expanded together in one generate call (virtual loss keeps them apart)."""
    num_candidates: int = 4
    """Steps sampled per expansion (k)."""
    c_puct: float = 1.0
    """Exploration constant of PUCT (AlphaZero)."""
    widening_c: float = 1.0
    """Progressive widening coefficient; 0 disables widening."""
    widening_alpha: float = 0.5
    """Progressive widening exponent: a node may hold k * floor(c * N ** alpha) children."""
    prior_temperature: float = 1.0
    """Temperature of the softmax over siblings' mean step log-probabilities that gives priors."""
    final: Literal["visits", "value"] = "visits"
    """Answer by the most-visited path ("visits", AlphaZero) or the best terminal Q ("value")."""
    terminal_reward: Callable[[str], float] | None = None
    """Reward of a finished response's text (a verifier: training only; `solve` needs allow_oracle)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_simulations", "leaves_per_round", "num_candidates"):
            check_int("MCTSConfig", name, getattr(self, name))
        check_number("MCTSConfig", "c_puct", self.c_puct, 0.0)
        check_number("MCTSConfig", "widening_c", self.widening_c, 0.0)
        check_number("MCTSConfig", "widening_alpha", self.widening_alpha, 0.0, 1.0)
        check_number("MCTSConfig", "prior_temperature", self.prior_temperature, 1e-6)
        check_choice("MCTSConfig", "final", self.final, {"visits", "value"})


def can_widen(tree: SearchTree, node: int, config: MCTSConfig, coming: int = 0) -> bool:
    """Whether `node` may get more children; `coming` counts children already scheduled this round."""
    n = tree[node]
    allowed = config.num_candidates * max(1, math.floor(config.widening_c * n.visits ** config.widening_alpha))
    return len(n.children) + coming < allowed


def puct_score(tree: SearchTree, parent: int, child: int, c_puct: float, pending: Counter) -> float:
    """PUCT with virtual loss: in-flight selections count as visits of value 0."""
    n_parent = tree[parent].visits + pending[parent]
    n_child = tree[child].visits + pending[child]
    q = tree[child].value_sum / n_child if n_child else 0.0
    return q + c_puct * tree[child].prior * math.sqrt(n_parent) / (1 + n_child)


def select(tree: SearchTree, start: int, config: MCTSConfig, pending: Counter,
           coming: Counter | None = None) -> int:
    """Descend from `start` by PUCT to a node to expand (or a terminal node to revisit).

    `coming[node]`: children already scheduled below `node` this round (see `can_widen`).
    """
    coming = coming if coming is not None else Counter()
    node = start
    while True:
        if tree[node].terminal:
            return node
        children = [c for c in tree[node].children if not tree[c].pruned]
        if not children or can_widen(tree, node, config, coming[node]):
            return node
        node = max(children, key=lambda c: (puct_score(tree, node, c, config.c_puct, pending), -c))


def set_priors(tree: SearchTree, parent: int, temperature: float) -> None:
    """P(c) = softmax over siblings of (mean token log-probability of step c) / temperature."""
    children = tree[parent].children
    logits = [(sum(tree[c].logprobs) / len(tree[c].logprobs) if tree[c].logprobs else 0.0) / temperature
              for c in children]
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    for c, w in zip(children, weights):
        tree[c].prior = w / sum(weights)


def _prune_upwards(tree: SearchTree, node: int) -> None:
    tree[node].pruned = True
    parent = tree[node].parent
    while parent not in (ROOT, NO_PARENT) and all(tree[c].pruned for c in tree[parent].children):
        tree[parent].pruned = True
        parent = tree[parent].parent


def final_node(tree: SearchTree, rule: str) -> int:
    """The chosen response node (see the module docstring); the most-visited leaf if none finished."""
    terminals = [i for i in tree.terminal_nodes() if not tree[i].pruned] or tree.terminal_nodes()
    by_value = lambda i: (tree[i].value if tree[i].value is not None else -1.0, tree[i].visits, -i)  # noqa: E731
    if rule == "visits":
        node = ROOT
        while tree[node].children:
            children = [c for c in tree[node].children if not tree[c].pruned] or tree[node].children
            node = max(children, key=lambda c: (tree[c].visits, by_value(c)))
        if tree[node].terminal or not terminals:
            return node
    return max(terminals, key=by_value) if terminals else max(tree.leaves(), key=by_value)


def mcts(prompt_ids, policy, scorer, budget, config: MCTSConfig, seed: int) -> SearchResult:
    if scorer is None:
        raise ValueError("mcts needs a scorer (planner.solve supplies the Monte-Carlo scorer)")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "mcts")
    start, simulations, order = ROOT, 0, []
    resets = tree.meta.setdefault("resets", [])
    most = config.num_simulations + config.leaves_per_round - 1  # the last round is filled too
    while simulations < config.num_simulations:
        pending: Counter = Counter()
        coming: Counter = Counter()  # children scheduled per node this round (virtual expansion)
        to_expand, selected = [], []  # selected: this round's selections, (leaf, expanded)
        while len(to_expand) < config.leaves_per_round and simulations + len(selected) < most:
            leaf = select(tree, start, config, pending, coming)
            if tree[leaf].terminal:  # its value is known: back it up now and select again (see the docstring)
                backup(tree, leaf, tree[leaf].reward if tree[leaf].reward is not None else tree[leaf].score)
                selected.append((leaf, False))
                continue
            pending.update(tree.path(leaf))
            to_expand.append(leaf)  # a leaf selected again this round asks for num_candidates more
            selected.append((leaf, True))
            coming[leaf] += config.num_candidates
        params = config.step_sampling(config.num_candidates)
        fitted = fit_round(meter, tree, to_expand, params, scorer) if to_expand else ([], params)
        if fitted is not None:
            to_expand, params = fitted
        kept = len(to_expand) if fitted is not None else 0
        for leaf, expanded in selected:  # a selection whose leaf the budget dropped did not happen
            if expanded:
                if not kept:
                    continue
                kept -= 1
            order.append(leaf)
        simulations = len(order)
        if fitted is None:
            break
        groups = expand(tree, to_expand, policy, params, seeds.next(), config.max_steps) if to_expand else []
        for parent in dict.fromkeys(to_expand):
            set_priors(tree, parent, config.prior_temperature)
        new = [c for group in groups for c in group]
        values = evaluate(tree, new, scorer, config.terminal_reward, meter)
        for node, value in zip(new, values):
            backup(tree, node, value)
        if config.prune_below is not None:
            low = [c for c, v in zip(new, values) if v < config.prune_below]
            for c in low:
                _prune_upwards(tree, c)
            if low and len(resets) < config.max_resets:
                start = best_visited_node(tree)
                resets.append(start)
            elif tree[start].pruned:
                start = ROOT
    tree.meta["selection_order"] = order
    leaf = final_node(tree, config.final)
    if leaf != ROOT and not tree[leaf].terminal:  # the search ended before any response finished here
        remaining = config.max_step_tokens * max(1, config.max_steps - tree[leaf].depth)
        fitted = fit_round(meter, tree, [leaf], config.sampling(1, remaining))
        if fitted is not None:
            leaf = complete(tree, [leaf], policy, fitted[1], seeds.next())[0]
    answer = (config.extract or default_extract)(tree.response_text(leaf)) if leaf != ROOT else None
    return finish_search(tree, meter, leaf, answer)

