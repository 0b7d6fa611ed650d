"""Our GRPO/PPO policy loss and group advantages against TRL's own GRPOTrainer code (trl 1.16).

TRL buries both computations in GRPOTrainer methods (`_compute_loss`, and the advantage block of
`_generate_and_score_completions`). We run those methods unchanged on a stub trainer made with
`object.__new__(GRPOTrainer)` that carries only the attributes they read; the model forward and
the generation/reward calls are replaced on the instance by functions that return fixed tensors.
Everything between them (clipping, KL, aggregation, advantage normalisation) is TRL's code.

Which of our options matches which TRL setting (one process, no gradient accumulation):
    aggregation "seq_mean_token_mean"      <-> loss_type "grpo"
    aggregation "token_mean"               <-> loss_type "bnpo", and "dapo"
    aggregation "seq_mean_token_sum"       <-> loss_type "luspo" (importance_sampling_level "token")
    aggregation "seq_mean_token_sum_norm"  <-> loss_type "dr_grpo" (max_length = max_completion_length)
    epsilon_low / epsilon_high             <-> epsilon / epsilon_high
    dual_clip                              <-> delta ("two-sided clipping")
    kl_coef, kl_kind "k3"                  <-> beta (TRL's only estimator is k3)
    entropy_coef                           <-> entropy_coef (token-mean entropy in both)
    advantages: grpo                       <-> scale_rewards "group"
                dr_grpo                    <-> scale_rewards "none"
                reinforce_pp_baseline(batch_std_of="rewards") <-> scale_rewards "batch"
TRL's default is loss_type "dapo"; ours is "token_mean", the same reduction here.
"""

import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from rl.advantages import broadcast_to_tokens, dr_grpo, grpo, reinforce_pp_baseline
from rl.losses import PolicyLossConfig, policy_loss

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TRL warns about the installed vLLM version on import
    from trl.trainer.grpo_trainer import GRPOTrainer

B, T, MAX_COMPLETION_LENGTH = 6, 7, 10
EPS_LOW, EPS_HIGH = 0.2, 0.28


def make_batch():
    generator = torch.Generator().manual_seed(0)
    old_logp = -torch.rand(B, T, generator=generator, dtype=torch.float64) * 3  # (B, T)
    # ratios on both sides of the clip range
    logp = old_logp + 0.6 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    ref_logp = old_logp + 0.3 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    entropy = torch.rand(B, T, generator=generator, dtype=torch.float64) * 2
    advantages = torch.tensor([1.0, -0.8, 0.5, -1.2, 0.9, -0.3], dtype=torch.float64)  # (B,) one per sequence
    lengths = torch.tensor([7, 5, 1, 3, 7, 6])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (B, T) right padding
    return logp, old_logp, ref_logp, entropy, advantages, mask


def trl_stub(loss_type, beta, delta, entropy_coef, per_token_logps, entropies):
    """A GRPOTrainer with only what `_compute_loss` reads; the model forward returns fixed tensors."""
    trainer = object.__new__(GRPOTrainer)
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (per_token_logps, entropies, None)
    trainer.args = SimpleNamespace(use_bias_correction_kl=False, delta=delta, steps_per_generation=1)
    trainer.loss_type = loss_type
    trainer.beta = beta
    trainer.epsilon_low, trainer.epsilon_high = EPS_LOW, EPS_HIGH
    trainer.importance_sampling_level = "token"
    trainer.top_entropy_quantile = 1.0
    trainer.off_policy_mask_threshold = None
    trainer.use_vllm = False
    trainer.vllm_importance_sampling_correction = False
    trainer.model = SimpleNamespace(training=True)
    trainer.current_gradient_accumulation_steps = 1
    trainer.max_completion_length = MAX_COMPLETION_LENGTH
    trainer.accelerator = SimpleNamespace(
        num_processes=1, sync_gradients=True, gather=lambda x: x, reduce=lambda x, reduction: x
    )
    trainer._entropy_bonus_enabled = entropy_coef != 0
    trainer.entropy_coef = entropy_coef
    trainer.use_adaptive_entropy = False
    trainer.aux_loss_enabled = False
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer


AGGREGATION_OF_TRL_LOSS_TYPE = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "luspo": "seq_mean_token_sum",
    "dr_grpo": "seq_mean_token_sum_norm",
}


@pytest.mark.parametrize("loss_type", sorted(AGGREGATION_OF_TRL_LOSS_TYPE))
@pytest.mark.parametrize("beta, delta, entropy_coef", [(0.0, None, 0.0), (0.04, 1.5, 0.01)])
def test_policy_loss_equals_trl_compute_loss(loss_type, beta, delta, entropy_coef):
    logp, old_logp, ref_logp, entropy, advantages, mask = make_batch()

    trl_logp = logp.clone().requires_grad_(True)
    trainer = trl_stub(loss_type, beta, delta, entropy_coef, trl_logp, entropy)
    inputs = {
        "prompt_ids": torch.zeros(B, 0, dtype=torch.long),
        "prompt_mask": torch.zeros(B, 0, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "ref_per_token_logps": ref_logp,
        "num_items_in_batch": mask.sum(),
    }
    trl_loss = trainer._compute_loss(None, inputs)
    trl_loss.backward()

    config = PolicyLossConfig(
        epsilon_low=EPS_LOW,
        epsilon_high=EPS_HIGH,
        dual_clip=delta,
        aggregation=AGGREGATION_OF_TRL_LOSS_TYPE[loss_type],
        max_length=MAX_COMPLETION_LENGTH,
        kl_coef=beta,
        kl_kind="k3",
        entropy_coef=entropy_coef,
    )
    our_logp = logp.clone().requires_grad_(True)
    token_advantages = broadcast_to_tokens(advantages, mask)  # (B, T)
    loss, metrics = policy_loss(
        our_logp, old_logp, token_advantages, mask, config, ref_logp=ref_logp, entropy=entropy
    )
    loss.backward()

    assert abs(loss.item() - trl_loss.item()) < 1e-6
    assert_close(our_logp.grad, trl_logp.grad, atol=1e-6, rtol=0)
    trl_metrics = trainer._metrics["train"]
    # the inputs hit both clips, so the clip metrics are compared on non-trivial values
    assert trl_metrics["clip_ratio/low_mean"][0] > 0 and trl_metrics["clip_ratio/high_mean"][0] > 0
    assert metrics["clipfrac_low"] == pytest.approx(trl_metrics["clip_ratio/low_mean"][0], abs=1e-6)
    assert metrics["clipfrac_high"] == pytest.approx(trl_metrics["clip_ratio/high_mean"][0], abs=1e-6)
    assert metrics["clipfrac"] == pytest.approx(trl_metrics["clip_ratio/region_mean"][0], abs=1e-6)
    assert metrics["entropy"] == pytest.approx(trl_metrics["entropy"][0], abs=1e-6)
    if beta:
        assert metrics["kl"] == pytest.approx(trl_metrics["kl"][0], abs=1e-6)
    if delta is not None:
        assert metrics["dual_clipfrac"] > 0  # the dual clip changed at least one token here


def trl_advantages(rewards, scale_rewards):
    """Run the advantage block of GRPOTrainer._generate_and_score_completions on fixed rewards (P, G)."""
    num_prompts, num_generations = rewards.shape
    n = num_prompts * num_generations
    trainer = object.__new__(GRPOTrainer)
    trainer.accelerator = SimpleNamespace(
        device="cpu", process_index=0, num_processes=1, is_main_process=True, gather=lambda x: x
    )
    trainer.model = SimpleNamespace(training=True, is_gradient_checkpointing=False)
    trainer.environment_factories = None
    trainer.environments = None
    trainer.tools = None
    trainer._generate = lambda prompts: ([[1, 2]] * n, [[3, 4, 5]] * n, None, ["c"] * n, None, {}, None, None)
    trainer._calculate_rewards = lambda *args: rewards.reshape(n, 1).clone()  # (N, 1): one reward function
    trainer._tokenizer = SimpleNamespace(pad_token_id=0)
    trainer.pad_to_multiple_of = None
    trainer.mask_truncated_completions = False
    trainer.args = SimpleNamespace(
        per_device_train_batch_size=n, steps_per_generation=1, gradient_accumulation_steps=1,
        gradient_checkpointing_kwargs=None,
    )
    trainer.num_iterations = 1
    trainer.use_vllm = False
    trainer.vllm_importance_sampling_correction = False
    trainer.beta = 0.0
    trainer.num_generations = num_generations
    trainer.multi_objective_aggregation = "sum_then_normalize"
    trainer.reward_weights = torch.ones(1)
    trainer.reward_func_names = ["reward"]
    trainer.scale_rewards = scale_rewards
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer._logs = {
        "prompt": [], "completion": [], "advantages": [], "images": [],
        "rewards": defaultdict(list), "extra": defaultdict(list),
    }
    trainer._pending_extra_logs = {}
    trainer._pending_metrics = {}
    output = trainer._generate_and_score_completions([{"prompt": "p"} for _ in range(n)])
    return output["advantages"].view(num_prompts, num_generations)  # (P, G)


# Row 0 mixed, row 1 all equal (zero variance), row 2 one success in three, row 3 fractional rewards.
REWARDS = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 1.0], [0.25, 0.5, 1.0]])


@pytest.mark.parametrize(
    "scale_rewards, ours",
    [
        ("group", grpo),
        ("none", dr_grpo),
        ("batch", lambda rewards: reinforce_pp_baseline(rewards, batch_std_of="rewards")),
    ],
)
def test_group_advantages_equal_trl(scale_rewards, ours):
    expected = trl_advantages(REWARDS, scale_rewards)
    assert_close(ours(REWARDS), expected, atol=1e-6, rtol=0)
