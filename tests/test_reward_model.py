"""The outcome reward model: the Bradley-Terry loss by hand and against TRL, training from trees, and
loading the saved folder as a planner scorer for best-of-N reranking.

By hand: rewards chosen (2.0, 0.5), rejected (1.0, 1.5): margins (1, -1), losses log(1 + e^-1) = 0.313262
and log(1 + e^1) = 1.313262, mean 0.813262; accuracy 1/2; mean margin 0.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from planner.prm_scorers import SequenceRewardScorer, load_scorer
from planner.tree import SearchTree
from rl.reward_model import RewardModelConfig, bradley_terry_loss, train_reward_model

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from trl.trainer.reward_trainer import RewardTrainer


def test_bradley_terry_loss_and_accuracy_by_hand():
    loss, metrics = bradley_terry_loss(torch.tensor([2.0, 0.5]), torch.tensor([1.0, 1.5]))
    assert loss.item() == pytest.approx(0.813262, abs=1e-6)
    assert metrics == {"bt_loss": pytest.approx(0.813262, abs=1e-6), "accuracy": 0.5, "margin": 0.0}
    with pytest.raises(ValueError, match=r"must both be \(B,\)"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))


def test_bradley_terry_loss_matches_trl_reward_trainer():
    rewards = torch.randn(12, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # 6 chosen, 6 rejected
    trainer = object.__new__(RewardTrainer)
    trainer.model = SimpleNamespace(training=True)
    trainer.args = SimpleNamespace(center_rewards_coefficient=None)
    trainer.accelerator = SimpleNamespace(gather_for_metrics=lambda x: x, gather=lambda x: x)
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer._total_train_tokens, trainer._tp_size = 0, 1
    model = lambda **kwargs: SimpleNamespace(logits=rewards)  # noqa: E731
    expected = trainer.compute_loss(model, {"attention_mask": torch.ones(12, 3)})
    ours, metrics = bradley_terry_loss(rewards[:6, 0], rewards[6:, 0])
    torch.testing.assert_close(ours, expected)
    assert metrics["accuracy"] == pytest.approx(trainer._metrics["train"]["accuracy"][0])


def toy_trees(tokenizer, count: int) -> list[SearchTree]:
    """Per prompt "<n>+0=?", two correct responses (ending in an even digit: a rule a tiny random model can
    learn in a few epochs) and two wrong ones (an odd digit)."""
    trees = []
    for n in range(count):
        even, odd = 2 * (n % 5), 2 * ((n + 2) % 5) + 1
        tree = SearchTree.new(tokenizer.encode(f"{n}+0=?"))
        for text, reward in ((f"<think>{n}</think>{even}", 1.0), (f"</think>{(even + 4) % 10}", 1.0),
                             (f"<think>{n}</think>{odd}", 0.0), (f"</think>{(odd + 4) % 10}", 0.0)):
            ids = tokenizer.encode(text) + [tokenizer.eos_token_id]
            tree[tree.add_child(0, ids, [-0.1] * len(ids), terminal=True)].reward = reward
        trees.append(tree)
    return trees


def test_trains_from_trees_saves_a_folder_that_reranks_best_of_n(tmp_path):
    from planner.policy.local_models import build_tiny_llama
    from transformers import AutoTokenizer

    policy = build_tiny_llama(tmp_path / "policy", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    trees = toy_trees(tokenizer, 60)
    config = RewardModelConfig(lr=3e-3, epochs=6, batch_size=16, heldout_fraction=0.2, progress=False)
    result = train_reward_model(policy, trees, config, tmp_path / "orm")
    assert result.train_pairs == 48 * 4 and result.heldout_pairs == 12 * 4  # every correct with every wrong
    assert result.history[-1]["heldout_accuracy"] >= 0.9 and result.history[-1]["accuracy"] >= 0.9
    assert result.history[-1]["bt_loss"] < result.history[0]["bt_loss"]

    scorer = load_scorer(tmp_path / "orm")  # its scorer.json: sequence classification over the sampled ids
    assert isinstance(scorer, SequenceRewardScorer) and scorer.input == "ids"
    tree = toy_trees(tokenizer, 61)[-1]  # an unseen prompt
    prefixes = [tree.prefix_ids(leaf) for leaf in tree.leaves()]  # 2 right, then 2 wrong
    values = scorer.score(prefixes, prompt_len=len(tree.prompt_ids), finished=[True] * len(prefixes))
    assert min(values[:2]) > max(values[2:])  # both correct responses above both wrong ones
    assert all(0 < v < 1 for v in values)


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="RewardModelConfig.heldout_fraction must be in"):
        RewardModelConfig(heldout_fraction=1.0)
    with pytest.raises(FileNotFoundError, match="no model folder"):
        train_reward_model(tmp_path / "none", [], RewardModelConfig(), tmp_path / "out")
