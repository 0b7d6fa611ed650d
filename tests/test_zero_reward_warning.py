"""The trainer warns, once per iteration, when every response of the iteration got reward 0."""

from __future__ import annotations

import logging

import pytest

from planner.strategies import BestOfNConfig
from rl.config import CriticConfig, LoopConfig, TrainConfig, TreeSearchConfig, ValueConfig
from rl.trainer import SearchTrainer


class Prompt:
    def __init__(self, question: str):
        self.question, self.reference = question, "8"


@pytest.mark.parametrize("reward, warned", [(0.0, True), (1.0, False)])
def test_warns_when_every_reward_is_zero(tiny_model_dir, tmp_path, caplog, reward, warned):
    config = TrainConfig(
        model=str(tiny_model_dir),
        loop=LoopConfig(output_dir=str(tmp_path), iterations=2, prompts_per_iteration=2, seed=0),
        search=TreeSearchConfig(strategy="best_of_n", best_of_n=BestOfNConfig(n=2, max_tokens=6, temperature=1.0)),
        value=ValueConfig(critic=CriticConfig(enabled=False)))
    trainer = SearchTrainer(config, [Prompt("3+5?"), Prompt("4+4?")], lambda text, problem: reward)
    with caplog.at_level(logging.WARNING, logger="rl.trainer"):
        history = trainer.run(progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.name == "rl.trainer"]
    assert [h["reward_mean"] for h in history] == [reward, reward]
    if not warned:
        assert warnings == []
        return
    assert len(warnings) == 2 and warnings[0].startswith("iteration 0: all 4 responses got reward 0")
    assert warnings[1].startswith("iteration 1: ")
    for cause in ("the form the task's verifier reads", "docs/data.md", "limit 6 tokens", "raise max_tokens",
                  "answer_field"):
        assert cause in warnings[0], cause
