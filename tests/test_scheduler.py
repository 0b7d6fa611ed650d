"""planner.scheduler: continuous refilling (`max_live`) keeps each search's tree, compute and budget;
what refilling changes when sampling is random."""

from __future__ import annotations

import random
import zlib
from collections import defaultdict

import pytest

from planner.scorers import Scorer
from planner.solve import solve, solve_batch
from planner.strategies import STRATEGIES
from test_budget import SCRIPTED, Endless  # the endless script and settings of the budget tests


class Staggered(dict):
    """Problem "k" (its prompt decodes to "k\\n") takes k steps before a response can finish, so the
    searches of one batch end at different rounds and refilling has slots to hand on."""

    def __missing__(self, key):
        prompt, _, response = key.partition("\n")
        if response.count("\n\n") < int(prompt):
            return [("x\n\n", -0.5, "step"), ("zz\n\n", -0.9, "step")]
        return [("7", -0.1, "stop"), ("y\n\n", -1.5, "step")]


class TextHash(Scorer):
    """A fixed value per response text (crc32), no model: the same prefix always gets the same value."""

    def __init__(self, decode) -> None:
        super().__init__()
        self.decode = decode

    def _score(self, prefixes, prompt_len, finished):
        return [zlib.crc32(self.decode(p[prompt_len:]).encode()) / 2**32 for p in prefixes]


PROBLEMS = ["3", "1", "4", "2", "5"]
SETTINGS = {
    "beam": dict(num_beams=4, beam_width=2, max_step_tokens=6, max_steps=8),
    "mcts": dict(num_simulations=12, leaves_per_round=2, num_candidates=2, max_step_tokens=6, max_steps=8),
}


def scripted_run(scripted_policy, strategy, max_live, batched=True, budget=None):
    """Solutions and, per engine call, the problems whose prompts were in it."""
    policy = scripted_policy(Staggered())
    calls = []
    original = policy._generate

    def recording(prompts, params, seed):
        calls.append({policy.decode(p)[0] for p in prompts})
        return original(prompts, params, seed)

    policy._generate = recording
    solutions = solve_batch(PROBLEMS, policy, strategy, TextHash(policy.decode), budget, seed=0, batched=batched,
                            max_live=max_live, extract=lambda text: text[-1:] or None, **SETTINGS[strategy])
    return solutions, calls


def outcome(solution) -> dict:
    """Everything a search produced but its timings."""
    compute = {k: v for k, v in solution.compute.to_dict().items() if k != "seconds"}
    return {"tree": solution.tree.to_dict(), "answer": solution.answer, "leaf": solution.leaf, "compute": compute}


@pytest.mark.parametrize("strategy", ["beam", "mcts"])
def test_refilling_gives_each_problem_the_tree_it_gets_without_refilling(scripted_policy, strategy):
    """The scripted policy's samples are a function of the prompt alone, so the schedule cannot change
    them: every max_live gives each problem the same tree and the same compute, tokens and scorer
    tokens included, as all-live batching and as solving the problems one by one."""
    alone, _ = scripted_run(scripted_policy, strategy, None, batched=False)
    reference = [outcome(s) for s in alone]
    assert len({len(s.tree) for s in alone}) > 1  # the searches differ in size: they end at different rounds
    for max_live in (None, 1, 2, 3):
        solutions, calls = scripted_run(scripted_policy, strategy, max_live)
        assert [outcome(s) for s in solutions] == reference, max_live
        assert max(len(c) for c in calls) == min(max_live or len(PROBLEMS), len(PROBLEMS))
    _, calls = scripted_run(scripted_policy, strategy, 2)
    # problem "1" ends first; its slot goes to "4" (third in the list) while "3" still runs
    assert {"3", "4"} in calls and not any(len(c) > 2 for c in calls)
    assert len(calls) < len(scripted_run(scripted_policy, strategy, 1)[1])  # merged: fewer engine calls


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_each_search_budget_holds_with_refilling(scripted_policy, table_scorer, strategy):
    """Budgets are per search and a ceiling whatever the schedule: with max_live=2 over 5 problems
    every search spends exactly what it spends alone (the script is deterministic), within its budget."""
    rng = random.Random(strategy)
    for budget in [rng.randint(1, 120) for _ in range(5)]:
        spent = {}
        for max_live, batched in ((None, False), (2, True)):
            policy = scripted_policy(Endless())
            scorer = table_scorer(defaultdict(lambda: 0.5), policy)
            solutions = solve_batch(["A", "B", "C", "D", "E"], policy, strategy, scorer, budget, batched=batched,
                                    max_live=max_live, extract=lambda text: None, **SCRIPTED[strategy])
            spent[max_live] = [s.compute.generated_tokens for s in solutions]
            assert sum(spent[max_live]) == policy.stats.generated_tokens
        assert spent[2] == spent[None] and max(spent[2]) <= budget, (budget, spent)


@pytest.fixture(scope="module")
def tiny_policy(tiny_model_dir):
    from planner.policy import load_policy

    return load_policy(tiny_model_dir, backend="hf", threads=1)


@pytest.mark.parametrize("strategy", ["beam", "mcts"])
def test_refilling_with_rollouts_keeps_each_budget_and_exact_tokens(tiny_policy, strategy):
    """The default Monte-Carlo scorer rolls out through each search's view: with refilling, its rollouts
    still count in the search that asked for them, and each search's token budget still holds."""
    before = tiny_policy.stats.copy()
    solutions = solve_batch([f"Q: {i}+{i}=? A:" for i in range(5)], tiny_policy, strategy, budget=150, seed=1,
                            max_live=2, temperature=1.0, **{**SETTINGS[strategy], "max_step_tokens": 4,
                                                            "max_steps": 4})
    spent = tiny_policy.stats - before
    assert sum(s.compute.generated_tokens for s in solutions) == spent.generated_tokens
    # a search counts each prompt it sent once; the engine also counts the copies that merging calls of
    # different n sends (planner.scheduler._Rendezvous.generate_merged)
    assert sum(s.compute.prompt_tokens for s in solutions) <= spent.prompt_tokens
    assert all(s.compute.generated_tokens <= 150 for s in solutions), [s.compute for s in solutions]


def test_sampled_searches_are_deterministic_but_depend_on_who_shares_their_calls(tiny_policy):
    """With random sampling a merged call draws from one seed derived from the seeds of the searches in
    it (`planner.scheduler`): the same max_live gives the same trees every time, another max_live
    other trees (the documented difference), and each search's compute stays its own."""
    problems = [f"Q: {i}+3=? A:" for i in range(4)]

    def trees(max_live):
        solutions = solve_batch(problems, tiny_policy, "mcts", TextHash(tiny_policy.decode), seed=0,
                                max_live=max_live, temperature=1.0, **SETTINGS["mcts"])
        return [s.tree.to_dict() for s in solutions]

    assert trees(2) == trees(2)
    assert trees(2) != trees(None)
    first = solve("Q: 0+3=? A:", tiny_policy, "mcts", TextHash(tiny_policy.decode), seed=0, temperature=1.0,
                  **SETTINGS["mcts"])
    assert trees(1)[0] == first.tree.to_dict()  # one live search: its calls are its own, as in solve


def test_max_live_must_be_a_positive_integer(scripted_policy):
    from planner.scheduler import run_interleaved

    with pytest.raises(ValueError, match=r"max_live must be an integer >= 1 or None \(all jobs live\); got 0"):
        run_interleaved([lambda view: None], scripted_policy(Staggered()), max_live=0)


def test_calls_that_differ_only_in_n_become_one_engine_call(scripted_policy):
    """Two searches ask for 2 and 3 samples of one step shape: one engine call of n=1 sends A twice and
    B three times; each search gets its own samples, counts its prompt once and its tokens exactly."""
    from planner.policy import SamplingParams
    from planner.scheduler import run_interleaved

    table = {"A": [("a\n\n", -0.5, "step"), ("b", -0.1, "stop")], "B": [("cc", -0.2, "stop")]}
    params = SamplingParams(n=1, max_tokens=8, stop=("\n\n",), seed=5)

    def asks(prompt: str, n: int):
        def job(view):
            return [[s.text for s in group] for group in view.generate([view.encode(prompt)], params.replace(n=n))], \
                view.stats.copy()
        return job

    policy = scripted_policy(table)
    (first, first_stats), (second, second_stats) = run_interleaved([asks("A", 2), asks("B", 3)], policy)
    assert policy.stats.calls == 1 and [policy.decode(p) for p in policy.seen_prompts] == ["A", "A", "B", "B", "B"]
    assert first == [["a\n\n", "b"]] and second == [["cc", "cc", "cc"]]
    assert (first_stats.calls, first_stats.prompt_tokens, first_stats.generated_tokens) == (1, 1, 3 + 2)
    assert (second_stats.prompt_tokens, second_stats.generated_tokens) == (1, 3 * 3)
