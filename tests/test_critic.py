"""The value critic: built from the policy's trunk, trained on Monte-Carlo targets, used as a scorer."""

from __future__ import annotations

import pytest
import torch

from planner.scorers import Scorer
from rl.critic import ValueCritic


@pytest.fixture()
def critic(tiny_model_dir):
    torch.manual_seed(0)
    return ValueCritic.from_policy(tiny_model_dir)


def test_trunk_is_the_policys_and_the_untrained_value_is_one_half(critic, tiny_model_dir):
    from transformers import AutoModelForCausalLM
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for name, p in policy.model.state_dict().items():
        assert torch.equal(p, critic.model.model.state_dict()[name]), name
    assert isinstance(critic, Scorer)
    assert critic.score([[5, 6, 7], [8, 9]]) == [0.5, 0.5]


def test_fit_learns_monte_carlo_targets_and_generalises(critic):
    # Target: 1.0 when the prefix ends with token 10, else 0.0 (a toy "correct step" signal).
    g = torch.Generator().manual_seed(1)
    prefixes = [torch.randint(6, 40, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
                for _ in range(160)]
    prefixes = [p[:-1] + [10] if i % 2 else p[:-1] + [20] for i, p in enumerate(prefixes)]
    targets = [1.0 if p[-1] == 10 else 0.0 for p in prefixes]
    train, held = slice(0, 128), slice(128, 160)

    def held_error():
        values = critic.score(prefixes[held])
        return sum((v - t) ** 2 for v, t in zip(values, targets[held])) / 32

    before = held_error()
    losses = critic.fit(prefixes[train], targets[train], epochs=6, lr=3e-3)
    assert losses[-1] < losses[0] * 0.5
    assert held_error() < before * 0.25, (before, held_error())
    assert critic.stats.calls == 2  # scoring is counted; training is not


def test_save_and_load_round_trip(critic, tmp_path):
    critic.fit([[5, 6, 7], [8, 9, 10]], [1.0, 0.0], epochs=3, lr=1e-2)
    critic.save_pretrained(tmp_path / "critic")
    again = ValueCritic.from_pretrained(tmp_path / "critic")
    assert again.score([[5, 6, 7], [8, 9, 10]]) == pytest.approx(critic.score([[5, 6, 7], [8, 9, 10]]), abs=1e-6)


def test_token_values_align_with_score(critic):
    ids, mask = critic.pad([[5, 6, 7, 8], [9, 10]])
    values = critic.token_values(ids, mask).detach()  # (2, 4)
    assert values.shape == (2, 4)
    critic.fit([[5, 6, 7, 8], [9, 10]], [0.9, 0.1], epochs=5, lr=1e-2)
    values = critic.token_values(ids, mask).detach()
    assert critic.score([[5, 6, 7, 8], [9, 10]]) == pytest.approx([float(values[0, 3].clamp(0, 1)),
                                                                   float(values[1, 1].clamp(0, 1))], abs=1e-5)


def test_bad_input(critic, tmp_path):
    with pytest.raises(FileNotFoundError, match="no model folder"):
        ValueCritic.from_policy(tmp_path / "nothing")
    with pytest.raises(ValueError, match="as many targets as prefixes"):
        critic.fit([[1, 2]], [0.5, 0.5])


def test_the_critic_trains_without_dropout(critic):
    """The value head regresses targets: in train mode two forwards must agree (no dropout). A keyword
    `classifier_dropout=0.0` to AutoConfig.from_pretrained is silently dropped by transformers 5, which
    left LlamaForTokenClassification's default dropout of 0.1 on the head."""
    ids, mask = critic.pad([[5, 6, 7, 8], [9, 10]])
    saved = critic.model.score.weight.detach().clone()
    critic.model.train()
    try:
        with torch.no_grad():
            critic.model.score.weight.normal_(generator=torch.Generator().manual_seed(0))  # a head that reads h
        first = critic.token_values(ids, mask).detach()
        second = critic.token_values(ids, mask).detach()
    finally:
        critic.model.eval()
        with torch.no_grad():
            critic.model.score.weight.copy_(saved)
    assert torch.equal(first, second)
