"""Configuration of the search-guided trainer: `TrainConfig` is the policy model and six parts, a docstring per field.

    TrainConfig(model="runs/demo/sft",
                engine=EngineConfig(backend="vllm"),            # serving and prompting
                search=TreeSearchConfig(strategy="best_of_n"),  # how trees are grown, what values them
                algorithm=AlgorithmConfig(estimator="rloo"),    # what the update optimizes
                learner=LearnerConfig(lr=1e-5),                 # how the update runs
                value=ValueConfig(),                            # the critic and the loop verifier
                loop=LoopConfig(iterations=20))                 # iterations, outputs, checkpoints, seed

Each setting lives in exactly one part (rl/config_parts.py holds five of them), and the command line
names it by the same path: `--learner.lr`, `--search.mcts.num_simulations`. `scripts/train.py --help`
is generated from these docstrings (see `rl/cli.py`), so they are the one place where each option is
documented. How trees are grown is the planner's own strategy config (`planner.strategies`), held in
`search` as it is, with only the sampling temperature set for training (1.0: the tokens come from the
policy itself, so the importance ratio is exact; another temperature needs `algorithm.tis_cap`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rl.config_parts import (TREE_STRATEGIES, AlgorithmConfig, EngineConfig, LearnerConfig, LoopConfig,
                             TreeSearchConfig, as_dataclass, check_choice, check_counts, fail)

__all__ = ["AlgorithmConfig", "CriticConfig", "EngineConfig", "LearnerConfig", "LoopConfig", "LoopVerifierConfig",
           "TREE_STRATEGIES", "TrainConfig", "TreeSearchConfig", "ValueConfig"]


@dataclass
class CriticConfig:
    """The value critic: a scalar head on a copy of the policy's trunk, or of another model's (rl/critic.py)."""

    enabled: bool | None = None
    """Train a critic: True always, False never, None (auto) only when something reads it: the "gae"
    estimator, or a tree search (beam, DVTS, MCTS) it guides (`use_as_scorer`) with no `search.scorer`
    or loop verifier in its place. `TrainConfig.trains_critic` says which."""
    model: str = ""
    """Folder of the model whose trunk the critic copies; "" copies the policy's. It must read the policy's
    token ids (the same vocabulary). A smaller trunk makes every critic pass cheaper (docs/benchmarks.md,
    "Critic trunk"; `DemoConfig.rl_critic`)."""
    target: Literal["tree", "gae"] = "tree"
    """Regression target: "tree" = Monte-Carlo node values of the search trees (mean leaf reward
    below each node; AlphaZero/TS-LLM-style value learning), "gae" = GAE returns (PPO; needs
    algorithm.estimator="gae")."""
    lr: float = 1e-3
    """AdamW learning rate of the critic."""
    clip_range: float = 0.2
    """Clip of the value update around the old values (PPO2's clipped value loss)."""
    use_as_scorer: bool = True
    """Guide beam/DVTS/MCTS with the trained critic (from the second iteration on): the closed loop."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.value.critic"
        check_choice(owner, "target", self.target, ("tree", "gae"))
        if not self.lr > 0:
            fail(owner, "lr", "a number > 0", self.lr)
        if not self.clip_range > 0:
            fail(owner, "clip_range", "a number > 0", self.clip_range)


@dataclass
class LoopVerifierConfig:
    """The loop's own value (rl/loop_verifier.py): a generative verifier trained every iteration on the
    trees' verified leaves, which values the next iteration's search."""

    model: str = ""
    """Folder of the causal LM it starts from; it must read the policy's token ids (the same tokenizer).
    "": no loop verifier (the search is valued by `search.scorer` or the critic)."""
    steps: int = 40
    """AdamW steps per iteration, each on `batch_size` responses drawn from the buffer."""
    batch_size: int = 32
    """Responses per step."""
    lr: float = 1e-3
    """AdamW learning rate."""
    buffer: int = 4096
    """Most distinct verified-correct responses kept, the newest first."""
    unlikelihood_coef: float = 0.0
    """Weight of the unlikelihood term on the steps the trees show went wrong (0: SFT alone)."""
    reduce: Literal["min", "mean"] = "min"
    """How a prefix's token probabilities become its value (`planner.LikelihoodVerifier`)."""
    min_likelihood: float = 0.0
    """Keep a verified-correct response for training only when the current verifier gives its least likely
    token at least this probability, in [0, 1) (0: keep every verified response)."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.value.loop_verifier"
        check_counts(owner, self, ("steps", "batch_size", "buffer"))
        if not self.lr > 0:
            fail(owner, "lr", "a number > 0", self.lr)
        if not self.unlikelihood_coef >= 0:
            fail(owner, "unlikelihood_coef", "a number >= 0", self.unlikelihood_coef)
        if not 0.0 <= self.min_likelihood < 1.0:
            fail(owner, "min_likelihood", "a number in [0, 1)", self.min_likelihood)
        check_choice(owner, "reduce", self.reduce, ("min", "mean"))




@dataclass
class ValueConfig:
    """What values the search besides a given scorer: the value critic and the loop verifier. The critic is
    built only when something reads it (`CriticConfig.enabled`, `TrainConfig.trains_critic`), the loop
    verifier only when `loop_verifier.model` is set."""

    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value critic."""
    loop_verifier: LoopVerifierConfig = field(default_factory=LoopVerifierConfig)
    """The loop's own value (rl/loop_verifier.py): a generative verifier trained every iteration on the trees'
    verified-correct leaves; when `loop_verifier.model` is set it values every iteration's search."""

    def __post_init__(self) -> None:
        self.critic = as_dataclass(CriticConfig, self.critic)
        self.loop_verifier = as_dataclass(LoopVerifierConfig, self.loop_verifier)


@dataclass
class TrainConfig:
    """Search-guided RL: grow trees, reward leaves, update policy and critic, push weights."""

    model: str = ""
    """Policy model folder (a save_pretrained folder), or a name of planner.policy.local_models.NAMED_MODELS
    ("smollm2", "qwen2.5-coder-0.5b")."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """The serving engine that samples the trees, and the prompts it is given."""
    search: TreeSearchConfig = field(default_factory=TreeSearchConfig)
    """How training trees are grown, and what values the search."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """What the policy update optimizes."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """How the update runs."""
    value: ValueConfig = field(default_factory=ValueConfig)
    """The value critic and the loop verifier."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """The outer loop: iterations, outputs, checkpoints, seed, threads."""

    def __post_init__(self) -> None:
        for name, kind in (("engine", EngineConfig), ("search", TreeSearchConfig), ("algorithm", AlgorithmConfig),
                           ("learner", LearnerConfig), ("value", ValueConfig), ("loop", LoopConfig)):
            setattr(self, name, as_dataclass(kind, getattr(self, name)))
        self._check_across_parts()

    def _check_across_parts(self) -> None:
        """The checks that read several parts; each part checks its own fields."""
        algorithm, critic = self.algorithm, self.value.critic
        if algorithm.needs_critic and critic.enabled is False:
            raise ValueError(f"TrainConfig.algorithm.estimator={algorithm.estimator!r} needs the critic: set "
                             "value.critic.enabled=True")
        if critic.enabled is not False and critic.target == "gae" and algorithm.estimator != "gae":
            raise ValueError("TrainConfig: value.critic.target='gae' regresses GAE returns, which only "
                             f"algorithm.estimator='gae' computes; got estimator={algorithm.estimator!r}: set "
                             "value.critic.target='tree' or algorithm.estimator='gae'")
        if self.loop.prompts_per_iteration % self.learner.minibatches:
            raise ValueError(f"TrainConfig: the batch of loop.prompts_per_iteration={self.loop.prompts_per_iteration} "
                             f"prompts is not divisible into learner.minibatches={self.learner.minibatches}; pick a "
                             "divisor")
        if self.value.loop_verifier.model and self.search.scorer:
            raise ValueError("TrainConfig: search.scorer and value.loop_verifier.model both name the value that "
                             "guides the search; set one of them")
        temperature, strategy = self.search.temperature, self.search.strategy
        if temperature != 1.0 and algorithm.tis_cap is None:
            raise ValueError(f"TrainConfig: search.{strategy}.temperature={temperature} samples from softmax(logits / "
                             f"{temperature}), not from the policy the update trains, so the update is off-policy: "
                             "set algorithm.tis_cap (e.g. 2.0) to correct it with truncated importance weights, or "
                             f"sample at search.{strategy}.temperature=1.0")
        if algorithm.tis_cap is not None and algorithm.old_logprobs != "learner" and temperature == 1.0:
            raise ValueError("TrainConfig.algorithm.tis_cap weighs tokens by pi_learner_old / pi_engine, so it needs "
                             "algorithm.old_logprobs='learner' (with 'engine' there is no learner log-probability to "
                             "compare): set old_logprobs='learner' or tis_cap=None")

    @property
    def trains_critic(self) -> bool:
        """Whether the learner builds and trains a critic (see `CriticConfig.enabled`)."""
        critic = self.value.critic
        if critic.enabled is not None:
            return critic.enabled
        guides = (critic.use_as_scorer and self.search.strategy != "best_of_n" and not self.search.scorer
                  and not self.value.loop_verifier.model)
        return self.algorithm.needs_critic or guides
