"""The learner: advantage estimators, KL estimators and losses over batches built from search trees."""

from rl.advantages import (ADVANTAGE_ESTIMATORS, GROUP_ESTIMATORS, broadcast_to_tokens, compute_advantages, gae,
                           nonzero_variance_groups, tree_advantages_to_tokens, tree_step_advantages)
from rl.kl import KL_ESTIMATORS, AdaptiveKLController, FixedKLController, kl, kl_penalized_rewards
from rl.sft import COLD_START_SFT, ColdStartResult, SFTConfig, SFTResult, cold_start, load_pairs, pass_rates, train_sft
from rl.losses import (PolicyLossConfig, dpo_loss, entropy_from_logits, is_finite_loss, masked_mean, masked_whiten,
                       policy_loss, sequence_logprobs, sft_loss, value_loss)

__all__ = [
    "ADVANTAGE_ESTIMATORS", "GROUP_ESTIMATORS", "compute_advantages", "broadcast_to_tokens", "nonzero_variance_groups",
    "gae", "tree_step_advantages", "tree_advantages_to_tokens",
    "kl", "KL_ESTIMATORS", "kl_penalized_rewards", "AdaptiveKLController", "FixedKLController",
    "PolicyLossConfig", "policy_loss", "value_loss", "dpo_loss", "sft_loss", "sequence_logprobs",
    "entropy_from_logits", "masked_mean", "masked_whiten", "is_finite_loss",
    "SFTConfig", "SFTResult", "ColdStartResult", "COLD_START_SFT", "train_sft", "cold_start", "load_pairs", "pass_rates",
]
