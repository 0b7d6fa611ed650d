"""DPO: every loss variant by hand and against TRL's DPOTrainer (trl 1.16); online and offline training.

Hand-worked pair: beta = 0.5, log pi(y_w) = -1, log pi(y_l) = -2, log ref(y_w) = log ref(y_l) = -1.5, so
the log-ratios are +0.5 and -0.5 and logits = 1:
  sigmoid   -log sigmoid(0.5)                                  = log(1 + e^-0.5)          = 0.474077
  cDPO 0.1  0.9 * 0.474077 + 0.1 * log(1 + e^0.5) = 0.9 * 0.474077 + 0.1 * 0.974077     = 0.524077
  rDPO 0.1  (0.9 * 0.474077 - 0.1 * 0.974077) / 0.8                                     = 0.411577
  IPO       chosen 2 tokens, rejected 4: 0.5 / 2 + 0.5 / 4 = 0.375; (0.375 - 1 / (2 * 0.5))^2 = 0.390625
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from planner.strategies import BestOfNConfig
from rl.config import LoopConfig, TrainConfig, TreeSearchConfig
from rl.dpo import DPOConfig, OnlineDPO, train_dpo_offline
from rl.dpo_losses import dpo_loss
from rl.pairs import PairConfig
from rl.tree_store import TreeStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TRL warns about the installed vLLM version on import
    from trl.trainer.dpo_trainer import DPOTrainer


def hand_pair(loss_type, smoothing=0.0):
    t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    return dpo_loss(t(-1.0), t(-2.0), t(-1.5), t(-1.5), beta=0.5, label_smoothing=smoothing, loss_type=loss_type,
                    chosen_lengths=t(2.0), rejected_lengths=t(4.0))


@pytest.mark.parametrize("loss_type, smoothing, expected", [
    ("sigmoid", 0.0, 0.474077), ("sigmoid", 0.1, 0.524077), ("robust", 0.1, 0.411577), ("ipo", 0.0, 0.390625)])
def test_each_variant_by_hand(loss_type, smoothing, expected):
    loss, metrics = hand_pair(loss_type, smoothing)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["rewards_chosen"] == pytest.approx(0.25) and metrics["rewards_rejected"] == pytest.approx(-0.25)
    assert metrics["reward_accuracy"] == 1.0 and metrics["reward_margin"] == pytest.approx(0.5)


def test_bad_settings_raise_one_clear_error():
    t = torch.zeros(1)
    with pytest.raises(ValueError, match=r"loss_type must be one of \['sigmoid', 'ipo', 'robust'\]; got 'hinge'"):
        dpo_loss(t, t, t, t, loss_type="hinge")
    with pytest.raises(ValueError, match="loss_type 'ipo' needs chosen_lengths and rejected_lengths"):
        dpo_loss(t, t, t, t, loss_type="ipo")
    with pytest.raises(ValueError, match="label_smoothing applies to loss_type 'sigmoid'"):
        dpo_loss(t, t, t, t, loss_type="ipo", label_smoothing=0.1)
    with pytest.raises(ValueError, match="DPOConfig.beta must be > 0; got 0"):
        DPOConfig(beta=0)


# ---- against TRL -----------------------------------------------------------------------------------
B, L = 5, 9


def trl_batch():
    """Per-token log-probs of B chosen then B rejected rows (2B, L - 1) under policy and reference, zero
    outside each row's completion, and the completion mask (2B, L), as TRL's forward produces them."""
    generator = torch.Generator().manual_seed(0)
    prompt = torch.tensor([2, 3, 1, 4, 2, 3, 2, 1, 3, 2])
    length = torch.tensor([4, 2, 5, 3, 6, 1, 3, 7, 2, 4])
    position = torch.arange(L)
    mask = ((position >= prompt[:, None]) & (position < (prompt + length)[:, None])).long()  # (2B, L)
    policy = -torch.rand(2 * B, L - 1, generator=generator, dtype=torch.float64) * 2 * mask[:, 1:]
    reference = policy + 0.4 * torch.randn(2 * B, L - 1, generator=generator, dtype=torch.float64) * mask[:, 1:]
    return policy, reference, mask


def trl_loss(loss_type, beta, smoothing, policy, reference, mask):
    """TRL's own `_compute_loss` on a stub trainer that carries only what it reads; the model forward returns
    the fixed per-token log-probs, and the reference's sums come in precomputed (precompute_ref_log_probs)."""
    trainer = object.__new__(DPOTrainer)
    trainer.model = SimpleNamespace(training=True)
    trainer.accelerator = SimpleNamespace(device="cpu", gather_for_metrics=lambda x: x, gather=lambda x: x)
    trainer.aux_loss_enabled = False
    trainer.precompute_ref_logps = True
    trainer.ld_alpha = None
    trainer.f_divergence_type = "reverse_kl"
    trainer.loss_types, trainer.loss_weights = [loss_type], [1.0]
    trainer.beta, trainer.label_smoothing, trainer.use_weighting = beta, smoothing, False
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer._total_train_tokens, trainer._tp_size = 0, 1
    zeros = torch.zeros_like(policy)
    model = lambda **kwargs: SimpleNamespace(log_probs=policy, entropy=zeros, mean_logits=zeros,  # noqa: E731
                                             is_top1=zeros.bool())
    ref_sums = reference.sum(1)
    inputs = {"input_ids": torch.zeros_like(mask), "attention_mask": torch.ones_like(mask), "completion_mask": mask,
              "ref_chosen_logps": ref_sums[:B], "ref_rejected_logps": ref_sums[B:]}
    return trainer._compute_loss(model, inputs, return_outputs=False)


def ours(loss_type, beta, smoothing, policy, reference, mask):
    sums, ref_sums, lengths = policy.sum(1), reference.sum(1), mask.sum(1).double()
    loss, _ = dpo_loss(sums[:B], sums[B:], ref_sums[:B], ref_sums[B:], beta=beta, label_smoothing=smoothing,
                       loss_type=loss_type, chosen_lengths=lengths[:B], rejected_lengths=lengths[B:])
    return loss


@pytest.mark.parametrize("loss_type, beta, smoothing", [
    ("sigmoid", 0.1, 0.0), ("sigmoid", 0.7, 0.0), ("ipo", 0.1, 0.0), ("ipo", 0.5, 0.0), ("robust", 0.3, 0.1),
    ("robust", 0.1, 0.25)])
def test_matches_trl_dpo_trainer(loss_type, beta, smoothing):
    policy, reference, mask = trl_batch()
    expected = trl_loss(loss_type, beta, smoothing, policy, reference, mask)
    torch.testing.assert_close(ours(loss_type, beta, smoothing, policy, reference, mask), expected)


def test_conservative_dpo_is_trl_sigmoid_on_the_pairs_and_on_the_swapped_pairs():
    # TRL 1.16's "sigmoid" has no label smoothing; cDPO = (1 - e) * DPO(pairs) + e * DPO(pairs swapped)
    policy, reference, mask = trl_batch()
    swap = lambda x: torch.cat([x[B:], x[:B]])  # noqa: E731
    e = 0.2
    expected = (1 - e) * trl_loss("sigmoid", 0.4, 0.0, policy, reference, mask) + \
        e * trl_loss("sigmoid", 0.4, 0.0, swap(policy), swap(reference), swap(mask))
    torch.testing.assert_close(ours("sigmoid", 0.4, e, policy, reference, mask), expected)


# ---- training from trees -----------------------------------------------------------------------------
@dataclass
class Prompt:
    question: str
    reference: str = ""
    id: str = ""


def digit_fraction(text: str, problem) -> float:
    """A dense toy reward (as in tests/test_trainer.py): different outcomes in nearly every tree."""
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


@pytest.fixture(scope="module")
def dpo_model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("dpo-tiny"), init_std=0.1, seed=1)


def online(model_dir, out, dpo: DPOConfig, iterations=5, tree_store: str | None = None) -> OnlineDPO:
    config = TrainConfig(model=str(model_dir),
                         loop=LoopConfig(output_dir=str(out), iterations=iterations, prompts_per_iteration=4, seed=0,
                                         tree_store=tree_store),
                         search=TreeSearchConfig(strategy="best_of_n",
                                                 best_of_n=BestOfNConfig(n=6, max_tokens=12, temperature=1.0)))
    return OnlineDPO(config, dpo, [Prompt(f"write digits {i}") for i in range(8)], digit_fraction)


def test_online_dpo_starts_at_log_2_moves_every_parameter_and_raises_the_reward(dpo_model_dir, tmp_path):
    trainer = online(dpo_model_dir, tmp_path / "run", DPOConfig(beta=0.1, lr=3e-3, batch_size=64, epochs=2),
                     iterations=8, tree_store=str(tmp_path / "trees.jsonl"))
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    history = trainer.run(progress=False)
    # a best-of-N tree is flat: one step pair per tree (the root's best vs worst response), and the
    # response pairs besides it (the same pair found twice is kept once)
    first = history[0]
    assert first["step_pairs"] == 4 and first["response_pairs"] > 0
    changed = [k for k, v in trainer.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) == len(before)
    rewards = [m["reward_mean"] for m in history]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.05, rewards
    assert len(TreeStore(tmp_path / "trees.jsonl")) == 8 * 4


def test_first_dpo_loss_is_log_2_with_either_reference(dpo_model_dir, tmp_path):
    for reference in ("behaviour", "model"):
        trainer = online(dpo_model_dir, tmp_path / reference, DPOConfig(reference=reference, batch_size=1000),
                         iterations=1)
        metrics = trainer.step()
        assert metrics["dpo_loss"] == pytest.approx(math.log(2), abs=1e-4), reference
        assert metrics["rewards_chosen"] == pytest.approx(0.0, abs=1e-4)


def test_offline_dpo_from_a_tree_store(dpo_model_dir, tmp_path):
    run = online(dpo_model_dir, tmp_path / "grpo", DPOConfig(), iterations=2, tree_store=str(tmp_path / "t.jsonl"))
    run.run(progress=False)
    result = train_dpo_offline(dpo_model_dir, tmp_path / "t.jsonl", DPOConfig(epochs=1, batch_size=8,
                                                                             pairs=PairConfig(continuation="leaf")),
                               tmp_path / "offline", min_version=1)
    assert (result.policy_dir / "config.json").is_file()
    assert result.metrics["trees"] == 4 and result.metrics["pairs"] > 0
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no trees"):
        train_dpo_offline(dpo_model_dir, tmp_path / "empty.jsonl", DPOConfig(), tmp_path / "never")
