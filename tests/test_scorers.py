"""Scorers: the model scorer (batched, both paddings), outcome, Monte-Carlo rollouts, the oracle,
and step-score aggregation."""

from __future__ import annotations

import re

import pytest
import torch

from planner.budget import Spend
from planner.monte_carlo import MonteCarloScorer
from planner.scorers import AGGREGATIONS, ModelScorer, OutcomeScorer, VerifierOracleScorer, aggregate
from planner.solve import solve_batch


def last_number(text: str) -> str | None:
    found = re.findall(r"\d+", text)
    return found[-1] if found else None


def test_aggregations():
    scores = [0.5, 0.8, 0.25]
    assert {name: aggregate(scores, name) for name in AGGREGATIONS} == {
        "last": 0.25, "min": 0.25, "product": pytest.approx(0.1), "mean": pytest.approx(0.5166667)}
    with pytest.raises(ValueError, match=r"aggregation must be one of \['last', 'mean', 'min', 'product'\]; got 'max'"):
        aggregate(scores, "max")


@pytest.fixture(scope="module")
def value_model(tiny_model_dir):
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(0)
    return AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_model_scorer_batched_equals_one_by_one(value_model, padding_side):
    scorer = ModelScorer(value_model, padding_side=padding_side, batch_size=3)
    prefixes = [[10, 11, 12], [13, 14, 15, 16, 17, 18], [19], [20, 21, 22, 23]]
    batched = scorer.score(prefixes)
    alone = [scorer.score([p])[0] for p in prefixes]
    # the same model on padded and unpadded inputs, float32: the padding is masked (weight 0), so only the
    # summation order differs (~1e-7 on a value in (0, 1)); 1e-5 holds on any CPU
    assert batched == pytest.approx(alone, abs=1e-5)
    assert all(0 < v < 1 for v in batched) and len(set(batched)) == 4
    # the value is read at the last token: the head's logit there, through a sigmoid
    with torch.no_grad():
        logit = value_model(input_ids=torch.tensor([prefixes[1]])).logits[0, -1, 0]
    assert batched[1] == pytest.approx(torch.sigmoid(logit).item(), abs=1e-5)
    assert scorer.stats.calls == 1 + 4 and scorer.stats.prompt_tokens == 2 * 14
    assert scorer.num_parameters == sum(p.numel() for p in value_model.parameters()) and not scorer.is_oracle


def test_model_scorer_loads_a_folder_and_clamps(tiny_model_dir):
    scorer = ModelScorer(tiny_model_dir, squash="clamp")
    values = scorer.score([[10, 11], [12, 13, 14]])
    assert all(0.0 <= v <= 1.0 for v in values)
    with pytest.raises(ValueError, match=r"squash must be one of \['clamp', 'sigmoid'\]; got 'tanh'"):
        ModelScorer(tiny_model_dir, squash="tanh")


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_merged_calls_give_each_call_its_own_values(value_model, padding_side):
    """Several searches' calls answered by one batched pass (`_score_merged`, grouped by length across
    calls) give each call the values of a forward pass over each prefix alone, to float rounding."""
    scorer = ModelScorer(value_model, padding_side=padding_side, batch_size=4)
    rng = torch.Generator().manual_seed(0)
    calls = [[torch.randint(6, 90, (int(torch.randint(1, 30, (1,), generator=rng)),), generator=rng).tolist()
              for _ in range(k)] for k in (3, 1, 7, 2)]
    merged = scorer._score_merged([(prefixes, None, [False] * len(prefixes)) for prefixes in calls])
    with torch.no_grad():
        alone = [[torch.sigmoid(value_model(input_ids=torch.tensor([p])).logits[0, -1, 0]).item() for p in prefixes]
                 for prefixes in calls]
    assert [len(v) for v in merged] == [3, 1, 7, 2]
    for got, want in zip(merged, alone):
        assert got == pytest.approx(want, abs=1e-5)


class Steps(dict):
    """Two steps, then an answer: every prompt's tree is the same shape."""

    def __missing__(self, key):
        if key.count("\n\n") < 2:
            return [("ab\n\n", -0.5, "step"), ("c\n\n", -0.7, "step"), ("d\n\n", -0.9, "step")]
        return [("7", -0.1, "stop"), ("8", -0.2, "stop")]


@pytest.mark.parametrize("strategy", ["beam", "mcts"])
def test_solve_batch_merges_a_model_scorers_calls_and_counts_each_search(scripted_policy, value_model, strategy):
    """solve_batch scores all searches' prefixes of a round in one `_score_merged`; each search gets the
    values, the tree and the compute (scorer calls, tokens, FLOPs) it gets when searched alone."""
    merged_sizes: list[int] = []

    class Counted(ModelScorer):
        def _score_merged(self, calls):
            merged_sizes.append(len(calls))
            return super()._score_merged(calls)

    settings = ({"num_beams": 4, "beam_width": 2} if strategy == "beam" else
                {"num_simulations": 6, "leaves_per_round": 2, "num_candidates": 2})
    runs = {}
    for batched in (False, True):
        policy = scripted_policy(Steps())
        scorer = Counted(value_model, batch_size=4)
        runs[batched] = solve_batch(["A", "B", "C"], policy, strategy, scorer, batched=batched, max_steps=4,
                                    extract=lambda text: text[-1:], **settings)
    assert merged_sizes and merged_sizes[0] == 3  # the first round: the three searches' calls in one
    assert sum(merged_sizes) == sum(s.compute.scorer_calls for s in runs[True])
    for alone, merged in zip(runs[False], runs[True]):
        scored = [n for n in range(len(merged.tree)) if merged.tree[n].score is not None]
        assert [n.token_ids for n in merged.tree.nodes] == [n.token_ids for n in alone.tree.nodes]
        assert [merged.tree[n].score for n in scored] == pytest.approx([alone.tree[n].score for n in scored], abs=1e-5)
        tokens = sum(len(merged.tree.prefix_ids(n)) for n in scored)  # each node is scored once
        assert merged.compute.scorer_tokens == alone.compute.scorer_tokens == tokens
        assert merged.compute.scorer_calls == alone.compute.scorer_calls
        assert merged.compute.scorer_flops == 2 * sum(p.numel() for p in value_model.parameters()) * tokens


def test_outcome_scorer_scores_finished_responses_only():
    decode = lambda ids: "".join(chr(i) for i in ids)  # noqa: E731
    scorer = OutcomeScorer(lambda text: 1.0 if text.endswith("!") else 0.0, decode, unfinished_value=0.5)
    prompt = [ord("Q")]
    values = scorer.score([prompt + [ord("!")], prompt + [ord("a")], prompt + [ord("!")]], prompt_len=1,
                          finished=[True, True, False])
    assert values == [1.0, 0.0, 0.5]


ROLLOUTS = {"Qa": [("=1", -1.0, "stop"), ("=1", -1.0, "stop"), ("=2", -1.0, "stop"), ("x", -1.0, "stop")],
            "Q": [("1", -1.0, "stop"), ("1", -1.0, "stop"), ("3", -1.0, "stop"), ("1", -1.0, "stop")]}


def test_monte_carlo_majority_agreement(scripted_policy):
    policy = scripted_policy(ROLLOUTS)
    scorer = MonteCarloScorer(policy, rollouts=4, max_tokens=8, extract=last_number)
    q = policy.encode("Q")
    unfinished, finished = q + policy.encode("a"), q + policy.encode("b=1")
    # "a" rolls out to a=1, a=1, a=2, ax: the majority answer 1 has 2 of 4 votes -> 0.5.
    # "b=1" is finished: it is judged against 4 rollouts from the prompt (1, 1, 3, 1): 3 of 4 agree.
    assert scorer.score([unfinished, finished], prompt_len=1, finished=[False, True]) == [0.5, 0.75]
    assert policy.stats.calls == 1  # both sets of rollouts in one generate call
    assert scorer.score([finished], prompt_len=1, finished=[True]) == [0.75]
    assert policy.stats.calls == 1  # the prompt's rollouts are reused within a search
    assert not scorer.is_oracle and scorer.num_parameters == 0


def test_monte_carlo_rollouts_fit_what_the_budget_has_left(scripted_policy):
    policy = scripted_policy(ROLLOUTS)
    scorer = MonteCarloScorer(policy, rollouts=4, max_tokens=8, extract=last_number)
    q = policy.encode("Q")
    unfinished, finished = q + policy.encode("a"), q + policy.encode("b=1")

    def at_most(tokens):
        return lambda spend: spend.generated_tokens <= tokens

    # 4 rollouts x 8 tokens = 32 > 16; 2 x 8 fit: "a" rolls out to a=1, a=1 -> agreement 2/2
    assert scorer.score([unfinished], prompt_len=1, affordable=at_most(16)) == [1.0]
    assert policy.stats.generated_tokens == 3 + 3  # "=1" + EOS, twice
    # not even 1 x 8 fits in 5: one rollout of at most 5 tokens: a=2 (3 ids) agrees with itself
    assert scorer.score([unfinished], prompt_len=1, affordable=at_most(5)) == [1.0]
    assert policy.stats.generated_tokens == 6 + 3
    # a finished response is judged by rollouts from the prompt: in 2 tokens, one rollout "1" + EOS
    assert scorer.score([finished], prompt_len=1, finished=[True], affordable=at_most(2)) == [1.0]
    # that small pool was not kept: without a budget the full pool is drawn (3, 1, 1, 1: 3 of 4 agree)
    calls = policy.stats.calls
    assert scorer.score([finished], prompt_len=1, finished=[True]) == [0.75] and policy.stats.calls == calls + 1
    with pytest.raises(ValueError, match="not even one 1-token rollout per prefix fits"):
        scorer.score([unfinished, unfinished], prompt_len=1, affordable=at_most(1))
    # the least spend a strategy reserves: one 1-token rollout per prefix that may be unfinished (its
    # prefix is the rollout's prompt), and one from the prompt for finished ones while the search holds
    # no pool of the prompt's rollouts yet
    fresh = MonteCarloScorer(policy, rollouts=4, max_tokens=8, extract=last_number)
    assert fresh.least_spend([5, 7], [None, None], q) == Spend(generated_tokens=2, prompt_tokens=5 + 7 + 1,
                                                             scorer_tokens=12)
    assert fresh.least_spend([5], [True], q) == Spend(generated_tokens=1, prompt_tokens=1, scorer_tokens=5)
    assert scorer.least_spend([5], [True], q) == Spend(scorer_tokens=5)  # it holds the full pool now


def test_monte_carlo_with_reference_is_an_oracle(scripted_policy):
    policy = scripted_policy(ROLLOUTS)
    scorer = MonteCarloScorer(policy, rollouts=4, extract=last_number, reference="2",
                              equivalent=lambda gold, pred: gold == pred)
    q = policy.encode("Q")
    assert scorer.score([q + policy.encode("a"), q + policy.encode("b=2")], prompt_len=1,
                        finished=[False, True]) == [0.25, 1.0]
    assert scorer.is_oracle


def test_verifier_oracle_scorer():
    decode = lambda ids: "".join(chr(i) for i in ids)  # noqa: E731
    scorer = VerifierOracleScorer("7", decode, extract=last_number, verify=lambda gold, pred: gold == pred)
    prompt = [ord("Q")]
    assert scorer.score([prompt + [ord("7")], prompt + [ord("8")], prompt], prompt_len=1) == [1.0, 0.0, 0.0]
    assert scorer.is_oracle


def test_scorer_output_is_checked():
    class Broken(OutcomeScorer):
        def _score(self, prefixes, prompt_len, finished):
            return [1.5]

    with pytest.raises(ValueError, match=r"must return one value in \[0, 1\] per prefix; got \[1.5\]"):
        Broken(lambda t: 0.0, str).score([[1]])


def test_answers_is_a_leaf_module_and_voting_is_gone():
    """Answer extraction and the vote rules live in planner.answers, which imports nothing from planner,
    so strategies and scorers both import it at module level: no import of a planner module is left
    inside a function of scorers.py or the strategies (the old lazy import that dodged a cycle)."""
    import ast
    import importlib.util
    from pathlib import Path

    import planner

    root = Path(planner.__file__).parent

    def imported(node) -> list[str]:
        if isinstance(node, ast.ImportFrom):
            return [node.module or ""]
        return [alias.name for alias in node.names] if isinstance(node, ast.Import) else []

    answers = ast.parse((root / "answers.py").read_text())
    assert not [m for n in ast.walk(answers) for m in imported(n) if m.startswith("planner")]
    for path in [root / "scorers.py", *sorted((root / "strategies").glob("*.py"))]:
        for func in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)]:
            inner = [m for n in ast.walk(func) for m in imported(n) if m.startswith("planner")]
            assert not inner, (path.name, func.name, inner)
    assert importlib.util.find_spec("planner.strategies.voting") is None
