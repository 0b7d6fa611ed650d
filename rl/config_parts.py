"""The parts of `TrainConfig` (rl/config.py), one small dataclass per concern, each setting in one place.

    engine     how the policy is served and prompted (backend, chat template, engine precision, replicas)
    search     how trees are grown (the strategy, its planner config, the scorer that values it)
    algorithm  what the update optimizes (advantage estimator, policy loss, KL, importance weights)
    learner    how the update runs (learning rate, epochs, device, precision, packing, memory options)
    loop       the outer loop (iterations, problems per iteration, outputs, checkpoints, seed, threads)

The value (critic, loop verifier) is `rl.config.ValueConfig`. Each part checks its own fields when
built; an error names the field by its dotted path (`TrainConfig.learner.lr`), as on the command line
(`--learner.lr`). Checks that read several parts are `TrainConfig`'s own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from planner.paths import check_output_dir, check_output_file
from planner.strategies import BeamConfig, BestOfNConfig, DVTSConfig, MCTSConfig, SearchConfig
from rl.estimators import ADVANTAGE_ESTIMATORS, NEEDS_CRITIC
from rl.kl import KL_ESTIMATORS
from rl.losses import PolicyLossConfig
from rl.runtime import check_precision

__all__ = ["AlgorithmConfig", "EngineConfig", "LearnerConfig", "LoopConfig", "TREE_STRATEGIES", "TreeSearchConfig"]

TREE_STRATEGIES = ("best_of_n", "beam", "dvts", "mcts")
"""Strategies that can grow training trees; each has a field of that name in `TreeSearchConfig`."""


def fail(owner: str, name: str, allowed: str, got) -> None:
    raise ValueError(f"{owner}.{name} must be {allowed}; got {got!r}")


def check_counts(owner: str, config, names: tuple[str, ...], low: int = 1, optional: bool = False) -> None:
    """Each of `names` is an integer >= `low` (or None when `optional`)."""
    for name in names:
        value = getattr(config, name)
        if optional and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            fail(owner, name, f"an integer >= {low}" + (" or None" if optional else ""), value)


def check_choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        fail(owner, name, f"one of {sorted(allowed)}", value)


def as_dataclass(kind, value):
    """`value` as a `kind` instance (a dict, as `dataclasses.asdict` writes it, becomes one)."""
    return kind(**value) if isinstance(value, dict) else value


@dataclass
class EngineConfig:
    """The serving engine that samples the trees, and the prompts it is given."""

    backend: Literal["hf", "vllm"] = "hf"
    """Serving engine for search: "hf" (transformers) or "vllm"."""
    chat: bool = True
    """Wrap each question in the tokenizer's chat template (Policy.encode_prompt); False: the plain question."""
    system_prompt: str | None = None
    """The chat's system message (None: none, or the template's own default, e.g. Qwen2.5's "You are Qwen,
    created by Alibaba Cloud. You are a helpful assistant.")."""
    assistant_prefill: str = ""
    """Text that opens the assistant's turn, after the template's generation prompt (e.g. "Let's think step
    by step."). It is part of the prompt: never trained on, and not part of the graded response."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The engine's weights: float32 keeps it equal to a float32 learner; bfloat16 is vLLM's usual GPU
    setting (then log the mismatch, and consider algorithm.tis_cap)."""
    replicas: int = 1
    """Serving engines: 1 = one engine in this process; N > 1 = an engine pool of N replicas as Ray actors
    (planner.policy.EnginePool; a local Ray instance, or the cluster at $RAY_ADDRESS), one CPU (or GPU)
    each. The search is the same; every weight push reaches every replica (docs/scale-out.md)."""
    share_weights: bool = True
    """backend "hf" in one process, float32: the engine serves the learner's own module, so the weights exist
    once and an update reaches the engine without a push. False: the engine holds a copy, updated by a push
    after every update, as vLLM's is."""
    memory_fraction: float = 0.85
    """vLLM on GPU: the fraction of GPU memory the engine may take (gpu_memory_utilization); the rest is
    the learner's when both share one GPU. Ignored on CPU (the KV cache has a fixed size there)."""
    in_process: bool = False
    """vLLM: run the engine in the trainer's process (no engine-core process): weight pushes hand the
    tensors to the engine directly, on a GPU without a copy through CPU memory."""
    sleep: bool = True
    """vLLM sharing the learner's GPU: sleep (level 1: weights to CPU, KV cache freed) during the
    learner phase, wake for the weight push. No effect on CPU or with the transformers engine."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.engine"
        check_choice(owner, "backend", self.backend, ("hf", "vllm"))
        check_choice(owner, "dtype", self.dtype, ("float32", "bfloat16", "float16"))
        check_counts(owner, self, ("replicas",))
        if not 0 < self.memory_fraction < 1:
            fail(owner, "memory_fraction", "a number in (0, 1)", self.memory_fraction)


@dataclass
class TreeSearchConfig:
    """How training trees are grown: the strategy, its settings (the planner's own configs, each with its own
    sampling temperature, 1.0 here so that the update is on-policy) and what values the search."""

    strategy: Literal["best_of_n", "beam", "dvts", "mcts"] = "mcts"
    """How trees are grown, with the settings in the field of the same name below: "best_of_n" = N
    independent samples (a flat tree: GRPO's group), "beam" = step-level beam search, "dvts" =
    diverse verifier tree search, "mcts" = PUCT tree search. Every leaf becomes a training row;
    unfinished leaves are first completed with one sample each."""
    best_of_n: BestOfNConfig = field(default_factory=lambda: BestOfNConfig(temperature=1.0))
    """Settings of strategy "best_of_n" (planner.strategies.BestOfNConfig)."""
    beam: BeamConfig = field(default_factory=lambda: BeamConfig(temperature=1.0))
    """Settings of strategy "beam" (planner.strategies.BeamConfig)."""
    dvts: DVTSConfig = field(default_factory=lambda: DVTSConfig(temperature=1.0))
    """Settings of strategy "dvts" (planner.strategies.DVTSConfig)."""
    mcts: MCTSConfig = field(default_factory=lambda: MCTSConfig(temperature=1.0))
    """Settings of strategy "mcts" (planner.strategies.MCTSConfig)."""
    scorer: str | None = None
    """A scorer folder (`planner.load_scorer`: its scorer.json names the format), e.g. the generative verifier
    that `scripts/lab/verifier_lm.py` trains: it values beam/DVTS/MCTS in every iteration, in place of the
    verifier oracle (first iteration) and the critic (`value.critic.use_as_scorer`). None: those two."""

    def __post_init__(self) -> None:
        for name, kind in (("best_of_n", BestOfNConfig), ("beam", BeamConfig), ("dvts", DVTSConfig),
                           ("mcts", MCTSConfig)):
            setattr(self, name, as_dataclass(kind, getattr(self, name)))
        check_choice("TrainConfig.search", "strategy", self.strategy, TREE_STRATEGIES)
        if not self.temperature > 0:
            fail("TrainConfig.search", f"{self.strategy}.temperature", "a number > 0 (training samples)",
                 self.temperature)

    @property
    def chosen(self) -> SearchConfig:
        """The settings of the chosen strategy (the field named by `strategy`)."""
        return getattr(self, self.strategy)

    @property
    def temperature(self) -> float:
        """The chosen strategy's sampling temperature (set it as `<strategy>.temperature`)."""
        return self.chosen.temperature

    @property
    def response_tokens(self) -> int:
        """Most tokens of one whole response under the chosen strategy (best_of_n's max_tokens, or a
        step strategy's max_step_tokens * max_steps)."""
        chosen = self.chosen
        return chosen.max_tokens if isinstance(chosen, BestOfNConfig) else chosen.max_step_tokens * chosen.max_steps


@dataclass
class AlgorithmConfig:
    """What the policy update optimizes: the advantage estimator, the loss, the KL and the importance weights."""

    estimator: str = "grpo"
    """Advantage estimator, one of rl.estimators.ADVANTAGE_ESTIMATORS (grpo, dr_grpo, rloo, reinforce,
    reward_to_go, reinforce_pp, reinforce_pp_baseline, remax, gae, tree, treerl, grpo_progress)."""
    progress_coef: float = 1.0
    """Weight of the process advantage in estimator "grpo_progress": the step's value (the scorer's, or
    its reward) minus the mean over it and its siblings, added to GRPO's outcome advantage (Setlur et
    al. 2024; `rl.batch.step_progress`). Other estimators ignore it."""
    gamma: float = 1.0
    """Discount of GAE and reward-to-go."""
    lam: float = 0.95
    """GAE's lambda (Schulman et al. 2016)."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """Clipped surrogate, aggregation, in-loss KL and entropy bonus (rl/losses.py)."""
    kl_placement: Literal["loss", "reward"] = "loss"
    """Where the KL to the reference goes: "loss" (GRPO, loss.kl_coef) or "reward" (PPO, REINFORCE++,
    kl_reward_coef per token)."""
    kl_reward_coef: float = 0.0
    """Beta of the KL-in-the-reward penalty (used when kl_placement="reward")."""
    kl_target: float | None = None
    """Target KL of the adaptive controller (Ziegler et al. 2019); None keeps beta fixed."""
    drop_zero_variance_groups: bool = False
    """Dynamic sampling (DAPO, arXiv 2503.14476): leave out groups whose rewards are all equal (their
    group-relative advantages are 0). When no group is left the iteration makes no update and pushes nothing."""
    old_logprobs: Literal["learner", "engine"] = "learner"
    """Log-probabilities of the behaviour policy in the importance ratio: "learner" recomputes them
    with the learner before the update (exact whatever the engine's precision; free with one epoch
    of one minibatch, where the ratio is 1 by definition, else one more forward over the batch),
    "engine" reuses those the engine returned while sampling (no forward; equal to the learner's
    when both run the same weights in float32, as on CPU; the logged engine_learner_logprob_gap
    says how close they are)."""
    tis_cap: float | None = None
    """Truncated importance sampling (rl/mismatch.py; Yao et al. 2025): each token's surrogate is weighted
    by min(pi_old / mu, tis_cap), mu the distribution the token was drawn from. At search temperature 1, mu
    is the engine's (its log-probabilities; needs old_logprobs="learner", else the weight is 1): the
    engine-learner mismatch. At temperature T != 1, mu = softmax(logits / T) of the weights that sampled,
    which the learner computes before its update (one more forward): the update then learns pi at
    temperature 1 from samples drawn hotter, and a search at T != 1 requires this setting. None: off (the
    mismatch metrics are logged either way)."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.algorithm"
        self.loss = as_dataclass(PolicyLossConfig, self.loss)
        check_choice(owner, "estimator", self.estimator, ADVANTAGE_ESTIMATORS)
        check_choice(owner, "old_logprobs", self.old_logprobs, ("learner", "engine"))
        check_choice(owner, "kl_placement", self.kl_placement, ("loss", "reward"))
        if not self.kl_reward_coef >= 0:
            fail(owner, "kl_reward_coef", "a number >= 0", self.kl_reward_coef)
        if not self.progress_coef >= 0:
            fail(owner, "progress_coef", "a number >= 0", self.progress_coef)
        if self.loss.kl_kind not in KL_ESTIMATORS:
            fail(owner, "loss.kl_kind", f"one of {list(KL_ESTIMATORS)}", self.loss.kl_kind)
        if self.tis_cap is not None and not self.tis_cap >= 1:
            fail(owner, "tis_cap", "a number >= 1 or None", self.tis_cap)

    @property
    def needs_critic(self) -> bool:
        """Whether the estimator reads a critic's values (GAE)."""
        return self.estimator in NEEDS_CRITIC

    @property
    def uses_reference(self) -> bool:
        """Whether a KL to the reference model is computed (in the loss or in the reward)."""
        return self.loss.kl_coef > 0 or (self.kl_placement == "reward" and self.kl_reward_coef > 0)


@dataclass
class LearnerConfig:
    """How the update runs: optimizer, passes over the batch, device, precision and memory options."""

    lr: float = 1e-4
    """AdamW learning rate of the policy."""
    epochs: int = 1
    """Passes over each iteration's batch (K)."""
    minibatches: int = 1
    """Minibatches per epoch; whole groups (prompts) go to one minibatch, so loop.prompts_per_iteration
    must be divisible by it."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    device: str = "auto"
    """Where the learner's models live: "auto" (CUDA when available, else the CPU), "cpu", "cuda", "cuda:1"."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Learner precision: "float32", or "bfloat16" = autocast with float32 master weights and AdamW state
    (rl/learner.py says why this form). bfloat16 needs a GPU or a CPU with bf16 instructions."""
    reference_device: str | None = None
    """The reference model's device (None: the learner's), e.g. "cpu" to keep GPU memory for the policy."""
    packing: bool = True
    """Tree packing (rl/packing.py): each tree's prompt and nodes go through the learner once, with a
    tree attention mask, instead of once per root-to-leaf row; the same update as row by row. Models
    that cannot take it (no 4D mask or position ids) fall back to rows with a warning."""
    pack_tokens: int | None = 128
    """Most tokens of one packed tree: a larger tree is cut into several packs of whole rows (siblings
    together), each repeating the shared prompt. A pack of N tokens costs N^2 in attention though each
    token needs only its path, so on small models smaller packs can be faster (docs/benchmarks.md,
    "Tree-packed learner"). None: one pack per tree."""
    data_parallel: Literal["ddp", "fsdp"] = "ddp"
    """Launched by torchrun over several ranks (rl/distributed.py): "ddp" keeps a full copy of each model
    per rank and averages gradients; "fsdp" (FSDP2 `fully_shard`) shards parameters, gradients and
    AdamW state over ranks, for models that do not fit one device. No effect in one process."""
    trainable: str | None = None
    """A regular expression: only policy parameters whose name it matches (re.search) are trained; the rest
    are frozen, with no gradient and no AdamW state (float32 AdamW needs about 16 bytes per trained
    parameter), so a large policy's learner fits a small machine
    (e.g. "model\\.layers\\.(2[0-3])\\.|model\\.norm" for Qwen2.5-0.5B's last 4 of 24 layers). None: every parameter."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward instead of storing them (policy and critic): less memory,
    about one more forward of time."""
    micro_batch_tokens: int | None = None
    """Most padded tokens (rows x longest row) per forward/backward; a minibatch's micro-batches
    accumulate into one optimizer step with the same gradient as the whole minibatch. None: one pass."""
    logprob_chunk: int | None = None
    """Compute log-probabilities over this many positions at a time from the trunk's hidden states, so
    no whole-batch float32 logits exist (rl/forward.py). None: the model's own logits."""
    threads: int | None = None
    """Torch threads of the learner's update alone (None: `loop.threads`). Search and update take turns, so
    on CPU the update may use the cores the engine leaves idle (docs/benchmarks.md, "Learner threads"). Keep
    it at 1 when other work shares the cores: oversubscribed torch threads can be many times slower."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.learner"
        check_counts(owner, self, ("epochs", "minibatches"))
        check_counts(owner, self, ("micro_batch_tokens", "logprob_chunk", "pack_tokens"), low=2, optional=True)
        check_counts(owner, self, ("threads",), optional=True)
        if not self.lr > 0:
            fail(owner, "lr", "a number > 0", self.lr)
        check_precision(owner, self.dtype, self.device)
        check_choice(owner, "data_parallel", self.data_parallel, ("ddp", "fsdp"))
        if self.trainable is not None:
            try:
                re.compile(self.trainable)
            except re.error as error:
                fail(owner, "trainable", f"a regular expression or None ({error})", self.trainable)


@dataclass
class LoopConfig:
    """The outer loop: how long, how much per iteration, where outputs go, checkpoints, seed and threads."""

    iterations: int = 10
    """Search-train iterations."""
    prompts_per_iteration: int = 8
    """Problems searched per iteration (P): one tree each."""
    output_dir: str = "runs/train"
    """Where metrics (metrics.jsonl, metrics.csv, TensorBoard events) and checkpoints go."""
    tree_store: str | None = None
    """Append every iteration's rewarded trees to this JSONL tree store (rl/tree_store.py), tagged with the
    policy version, for DPO, rejection-sampling SFT and the reward model to read later. None: not kept."""
    checkpoint_every: int = 5
    """Save a resumable checkpoint every this many iterations (and after the last one)."""
    checkpoints_kept: int = 2
    """Keep this many newest checkpoints (<output_dir>/checkpoints/iteration-N): --resume falls back to an
    older one when the newest is damaged (rl/checkpoint.py)."""
    seed: int = 0
    """Seed of everything (problem order, search, minibatches)."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms while the trainer runs: bit-exact reruns and resumes on CPU."""
    threads: int = 1
    """Torch threads of the learner and the engine, while the trainer runs (restored afterwards)."""
    debug: bool = False
    """Check every iteration that the engine's log-probabilities of the sampled tokens equal the
    learner's within 1e-3 (weights in sync); raise when they do not."""

    def __post_init__(self) -> None:
        owner = "TrainConfig.loop"
        check_counts(owner, self, ("iterations", "prompts_per_iteration", "checkpoint_every", "checkpoints_kept",
                                   "threads"))
        check_output_dir(self.output_dir, f"{owner}.output_dir")  # before any work, not at the first write
        if self.tree_store is not None:
            check_output_file(self.tree_store, f"{owner}.tree_store")
