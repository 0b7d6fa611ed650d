"""The learner: rows from search trees, advantage estimators, losses, the critic and the trainers."""

import runpy as _runpy
from pathlib import Path as _Path

# Another distribution may provide `planner`, `rl` or `verifiers` as well: fail here, naming it and the fix
# (verifiers/provenance.py, run from its file because the name `verifiers` may be the other one's).
_runpy.run_path(str(_Path(__file__).resolve().parents[1] / "verifiers" / "provenance.py"))["check_packages"]()
del _runpy, _Path

from rl.advantages import broadcast_to_tokens, gae, nonzero_variance_groups
from rl.batch import RolloutBatch, Row, batch_from_trees, monte_carlo_values, reward_leaves
from rl.config import (TREE_STRATEGIES, AlgorithmConfig, CriticConfig, EngineConfig, LearnerConfig, LoopConfig,
                       LoopVerifierConfig, TrainConfig, TreeSearchConfig, ValueConfig)
from rl.critic import ValueCritic
from rl.loop_verifier import LoopVerifier
from rl.dpo import DPOConfig, OnlineDPO, train_dpo_offline
from rl.dpo_losses import dpo_loss
from rl.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs, Advantages, estimate
from rl.kl import KL_ESTIMATORS, AdaptiveKLController, FixedKLController, kl, kl_penalized_rewards
from rl.losses import (PolicyLossConfig, entropy_from_logits, is_finite_loss, masked_mean, masked_whiten,
                       policy_loss, sequence_logprobs, sft_loss, value_loss)
from rl.presets import PRESETS, preset_config, train
from rl.pairs import PairConfig, PreferencePair, preference_pairs
from rl.reward_model import RewardModelConfig, bradley_terry_loss, train_reward_model
from rl.rs_sft import RejectionSamplingSFT, RSSFTConfig
from rl.sft import SFTConfig, SFTResult, load_pairs, train_sft
from rl.trainer import SearchTrainer
from rl.tree_store import StoredTree, TreeStore

__all__ = [
    "train", "PRESETS", "preset_config", "SearchTrainer", "TrainConfig", "EngineConfig", "TreeSearchConfig", "AlgorithmConfig", "LearnerConfig",
    "ValueConfig", "LoopConfig", "CriticConfig", "TREE_STRATEGIES", "ValueCritic", "LoopVerifierConfig",
    "LoopVerifier",
    "RolloutBatch", "Row", "batch_from_trees", "reward_leaves", "monte_carlo_values",
    "ADVANTAGE_ESTIMATORS", "AdvantageInputs", "Advantages", "estimate",
    "broadcast_to_tokens", "nonzero_variance_groups", "gae",
    "kl", "KL_ESTIMATORS", "kl_penalized_rewards", "AdaptiveKLController", "FixedKLController",
    "PolicyLossConfig", "policy_loss", "value_loss", "dpo_loss", "sft_loss", "sequence_logprobs",
    "entropy_from_logits", "masked_mean", "masked_whiten", "is_finite_loss",
    "SFTConfig", "SFTResult", "train_sft", "load_pairs",
    "TreeStore", "StoredTree", "PairConfig", "PreferencePair", "preference_pairs", "DPOConfig", "OnlineDPO",
    "train_dpo_offline", "RSSFTConfig", "RejectionSamplingSFT", "RewardModelConfig", "bradley_terry_loss",
    "train_reward_model",
]
