"""The loop's own value (rl/loop_verifier.py): what it learns from, that it learns, and that it guides the search."""

from __future__ import annotations

import pytest
import torch

from planner.prm_scorers import load_scorer
from planner.scorers import VerifierOracleScorer
from planner.tree import ROOT, SearchTree
from rl.config import CriticConfig, LoopVerifierConfig
from rl.loop_verifier import LoopVerifier, wrong_steps
from rl.trainer import SearchTrainer

from test_metrics_doc import assert_documented  # noqa: E402
from test_trainer import PROBLEMS, config  # noqa: E402  (tests/ is on sys.path under pytest)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("loop-tiny"), init_std=0.1, seed=1)


def has_digit(text: str, problem) -> float:
    """A reward the random tiny model often earns, so every iteration has verified leaves."""
    return float(any(ch.isdigit() for ch in text))


def _tree(tokenizer) -> tuple[SearchTree, dict[str, int]]:
    """Q: 1+1 -> "2" (right, reward 1) | "3" -> " ok" (reward 0) and " no" (reward 0)."""
    ids = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    tree = SearchTree.new(ids("Q: 1+1"))
    right = tree.add_child(ROOT, ids("2"), [0.0], terminal=True)
    wrong = tree.add_child(ROOT, ids("3"), [0.0])
    ok = tree.add_child(wrong, ids(" ok"), [0.0] * len(ids(" ok")), terminal=True)
    no = tree.add_child(wrong, ids(" no"), [0.0] * len(ids(" no")), terminal=True)
    for node, reward in ((right, 1.0), (ok, 0.0), (no, 0.0)):
        tree[node].reward = reward
    return tree, {"right": right, "wrong": wrong, "ok": ok, "no": no}


def test_wrong_steps_are_the_nodes_with_no_correct_leaf_under_a_parent_with_one(model_dir):
    from transformers import AutoTokenizer

    tree, nodes = _tree(AutoTokenizer.from_pretrained(model_dir))
    # Monte-Carlo values: root 1/3, "2" 1, "3" 0, " ok" 0, " no" 0: only "3" sits under a parent with value > 0
    assert wrong_steps(tree) == [(tree.prefix_ids(nodes["wrong"]), len(tree[ROOT].token_ids))]


def test_it_learns_the_verified_response_saves_a_scorer_folder_and_resumes_exactly(model_dir, tmp_path):
    verifier = LoopVerifier(LoopVerifierConfig(model=str(model_dir), steps=30, batch_size=4, lr=3e-3,
                                               unlikelihood_coef=1.0))
    tree, nodes = _tree(verifier.tokenizer)
    prompt_len = len(tree[ROOT].token_ids)
    prefixes = [tree.prefix_ids(nodes["right"]), tree.prefix_ids(nodes["wrong"])]

    def values():
        return verifier.scorer().score(prefixes, prompt_len=prompt_len, finished=[True, False])

    before = values()
    seen = verifier.observe([tree])
    assert seen == {"loop_value_new_correct": 1.0, "loop_value_correct": 1.0, "loop_value_filtered": 0.0,
                    "loop_value_wrong_steps": 1.0}
    assert verifier.observe([tree])["loop_value_new_correct"] == 0.0  # distinct responses only
    verifier.train(seed=0)
    after = values()
    assert after[0] > before[0] + 0.2, (before, after)  # the verified response became likely
    assert after[0] > after[1] + 0.2, after  # and the wrong step did not

    folder = verifier.save(tmp_path / "loop_value")
    loaded = load_scorer(folder, decode=verifier.tokenizer.decode)
    assert loaded.score(prefixes, prompt_len=prompt_len, finished=[True, False]) == pytest.approx(after, abs=1e-6)
    resumed = LoopVerifier(verifier.config, start=folder)
    assert resumed.correct == verifier.correct and resumed.wrong == verifier.wrong
    verifier.train(seed=1)
    resumed.train(seed=1)
    for (name, a), b in zip(verifier.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name  # the same AdamW state: the same next steps


def test_the_filter_keeps_the_verified_responses_the_verifier_finds_likely(model_dir):
    verifier = LoopVerifier(LoopVerifierConfig(model=str(model_dir)))
    tree, nodes = _tree(verifier.tokenizer)
    for node in ("ok", "no"):  # three verified responses now
        tree[nodes[node]].reward = 1.0
    prompt_len = len(tree[ROOT].token_ids)
    leaves = [tree.prefix_ids(nodes[n]) for n in ("right", "ok", "no")]
    # the reference: planner.LikelihoodVerifier's value of a finished response, least token probability
    expected = verifier.scorer().score(leaves, prompt_len=prompt_len, finished=[True] * 3)
    assert verifier.least_likely([(ids, prompt_len) for ids in leaves]) == pytest.approx(expected, rel=1e-5)
    middle = sorted(expected)[1]
    verifier.config = LoopVerifierConfig(model=str(model_dir), min_likelihood=middle)
    seen = verifier.observe([tree])
    assert (seen["loop_value_correct"], seen["loop_value_filtered"]) == (2.0, 1.0)
    kept = {ids for ids in verifier.correct}
    assert kept == {tuple(ids) for ids, p in zip(leaves, expected) if p >= middle}
    with pytest.raises(ValueError, match=r"min_likelihood must be a number in \[0, 1\)"):
        LoopVerifierConfig(min_likelihood=1.0)


def test_the_loop_verifier_values_every_search_and_learns_from_the_trees(model_dir, tmp_path):
    loop = LoopVerifierConfig(model=str(model_dir), steps=5, batch_size=4)
    trainer = SearchTrainer(config(model_dir, tmp_path, search=dict(strategy="mcts"), loop=dict(iterations=2),
                                   value=dict(critic=CriticConfig(enabled=False), loop_verifier=loop)), PROBLEMS,
                            has_digit)
    scorer = trainer._scorer(PROBLEMS[0])
    assert not isinstance(scorer, VerifierOracleScorer) and scorer.model is trainer.loop_verifier.model
    start = {k: v.clone() for k, v in trainer.loop_verifier.model.named_parameters()}
    history = trainer.run(progress=False)
    assert all(m["loop_value_correct"] > 0 for m in history), history
    assert all(m["loop_value_loss"] > 0 for m in history)
    assert_documented(history)
    moved = [k for k, v in trainer.loop_verifier.model.named_parameters() if not torch.equal(v, start[k])]
    assert moved  # it trained
    assert (tmp_path / "checkpoint" / "loop_value" / "scorer.json").is_file()  # inside each checkpoint
    resumed = SearchTrainer(config(model_dir, tmp_path, search=dict(strategy="mcts"), loop=dict(iterations=2),
                                   value=dict(critic=CriticConfig(enabled=False), loop_verifier=loop)),
                            PROBLEMS, has_digit, resume=True)
    assert resumed.loop_verifier.correct == trainer.loop_verifier.correct


def test_one_value_guides_the_search(model_dir, tmp_path):
    with pytest.raises(ValueError, match="search.scorer and value.loop_verifier.model both name"):
        config(model_dir, tmp_path, search=dict(strategy="mcts", scorer=str(model_dir)),
               value=dict(loop_verifier=LoopVerifierConfig(model=str(model_dir))))
    with pytest.raises(ValueError, match=r"TrainConfig.value.loop_verifier.steps must be an integer >= 1; got 0"):
        LoopVerifierConfig(model=str(model_dir), steps=0)
