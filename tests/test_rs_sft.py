"""Rejection-sampling SFT: which leaves are kept (hand tree), the data kept per round, and training."""

from __future__ import annotations

import pytest
import torch

from planner.strategies import BestOfNConfig
from rl.config import LoopConfig, TrainConfig, TreeSearchConfig
from rl.rs_sft import RejectionSamplingSFT, RSSFTConfig, kept_data, select_best_leaves


def test_verified_distinct_best_leaves_with_a_cap(hand_tree):
    # rewards: A1 (4) = 1, A2 (5) = 0, A3 (6) = 1 but A1's ids again, B1 (7) = 0, C1 (8) = 1
    assert sorted(select_best_leaves(hand_tree, RSSFTConfig(), seed=0)) == [4, 8]
    picked = {select_best_leaves(hand_tree, RSSFTConfig(max_per_prompt=1), seed=s)[0] for s in range(20)}
    assert picked == {4, 8}  # a tie: the seed decides, both are drawn
    assert select_best_leaves(hand_tree, RSSFTConfig(min_reward=0.0), seed=0)[:2] in ([4, 8], [8, 4])
    assert len(select_best_leaves(hand_tree, RSSFTConfig(min_reward=0.0), seed=0)) == 4  # 4 distinct responses
    assert select_best_leaves(hand_tree, RSSFTConfig(min_reward=1.5), seed=0) == []


def test_kept_data_are_the_sampled_ids_and_counted(hand_tree):
    examples, metrics = kept_data([hand_tree, hand_tree], RSSFTConfig(max_per_prompt=1), seed=0)
    assert len(examples) == 2 and all(e["prompt_ids"] == [1, 2] for e in examples)
    assert all(e["response_ids"] in ([10, 11, 2], [10, 13, 2]) for e in examples)
    assert metrics == {"kept_responses": 2, "prompts_with_kept": 2, "kept_prompt_share": 1.0, "kept_tokens": 6}


def test_bad_settings():
    with pytest.raises(ValueError, match="RSSFTConfig.max_per_prompt must be an integer >= 1; got 0"):
        RSSFTConfig(max_per_prompt=0)


class Prompt:
    def __init__(self, question):
        self.question, self.reference, self.id = question, "", question


def digit_fraction(text: str, problem) -> float:
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


def test_rounds_keep_data_train_every_parameter_and_raise_the_reward(tmp_path):
    from planner.policy.local_models import build_tiny_llama

    model = build_tiny_llama(tmp_path / "m", init_std=0.1, seed=1)
    config = TrainConfig(
        model=str(model),
        loop=LoopConfig(output_dir=str(tmp_path / "run"), iterations=8, prompts_per_iteration=4),
        search=TreeSearchConfig(strategy="best_of_n", best_of_n=BestOfNConfig(n=6, max_tokens=12, temperature=1.0)))
    trainer = RejectionSamplingSFT(config, RSSFTConfig(min_reward=0.15, max_per_prompt=2, lr=3e-3, epochs=2),
                                   [Prompt(f"write digits {i}") for i in range(8)], digit_fraction)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    history = trainer.run(progress=False)
    assert all(m["kept_responses"] <= 2 * 4 for m in history)
    assert history[0]["kept_responses"] > 0 and history[0]["sft_steps"] >= 1
    assert all(not torch.equal(v, before[k]) for k, v in trainer.policy.state_dict().items())
    rewards = [m["reward_mean"] for m in history]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.05, rewards
    assert (trainer.save_policy() / "config.json").is_file()
