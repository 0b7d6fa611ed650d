"""Configuration of the search-guided trainer: one dataclass per component, a docstring per field.

`scripts/train.py --help` is generated from these docstrings (see `rl/cli.py`), so they are the
one place where each option is documented. How trees are grown is the planner's own strategy
config (`planner.strategies`), held here as it is: one source of truth for search settings, with
only the sampling temperature set for training (1.0: the tokens come from the policy itself, so the
importance ratio is exact; another temperature needs `tis_cap`, which corrects for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.paths import check_output_dir, check_output_file
from planner.strategies import BeamConfig, BestOfNConfig, DVTSConfig, MCTSConfig, SearchConfig
from rl.estimators import ADVANTAGE_ESTIMATORS, NEEDS_CRITIC
from rl.kl import KL_ESTIMATORS
from rl.losses import PolicyLossConfig
from rl.runtime import check_precision

__all__ = ["CriticConfig", "TrainConfig", "TREE_STRATEGIES"]

TREE_STRATEGIES = ("best_of_n", "beam", "dvts", "mcts")
"""Strategies that can grow training trees; each has a field of that name in `TrainConfig`."""


def _fail(owner: str, name: str, allowed: str, got) -> None:
    raise ValueError(f"{owner}.{name} must be {allowed}; got {got!r}")


@dataclass
class CriticConfig:
    """The value critic: a scalar head on a copy of the policy's trunk, or of another model's (rl/critic.py)."""

    enabled: bool | None = None
    """Train a critic: True always, False never, None (auto) only when something reads it: the "gae"
    estimator, or a tree search (beam, DVTS, MCTS) it guides (`use_as_scorer`) with no `TrainConfig.scorer`
    or loop verifier in its place. `TrainConfig.trains_critic` says which."""
    model: str = ""
    """Folder of the model whose trunk the critic copies; "" copies the policy's. It must read the policy's
    token ids (the same vocabulary). A smaller trunk makes every critic pass cheaper: on the demo's trees
    a critic on the trunk of its 35k-parameter verifier made the learner update 0.48x as long as one on the
    1.06M-parameter policy's (docs/benchmarks.md, "Critic trunk"; `DemoConfig.rl_critic`)."""
    target: Literal["tree", "gae"] = "tree"
    """Regression target: "tree" = Monte-Carlo node values of the search trees (mean leaf reward
    below each node; AlphaZero/TS-LLM-style value learning), "gae" = GAE returns (PPO; needs
    estimator="gae")."""
    lr: float = 1e-3
    """AdamW learning rate of the critic."""
    clip_range: float = 0.2
    """Clip of the value update around the old values (PPO2's clipped value loss)."""
    use_as_scorer: bool = True
    """Guide beam/DVTS/MCTS with the trained critic (from the second iteration on): the closed loop."""

    def __post_init__(self) -> None:
        if self.target not in ("tree", "gae"):
            _fail("CriticConfig", "target", "one of ['gae', 'tree']", self.target)
        if not self.lr > 0:
            _fail("CriticConfig", "lr", "a number > 0", self.lr)
        if not self.clip_range > 0:
            _fail("CriticConfig", "clip_range", "a number > 0", self.clip_range)


@dataclass
class LoopVerifierConfig:
    """The loop's own value (rl/loop_verifier.py): a generative verifier trained every iteration on the
    trees' verified leaves, which values the next iteration's search."""

    model: str = ""
    """Folder of the causal LM it starts from; it must read the policy's token ids (the same tokenizer).
    "": no loop verifier (the search is valued by `TrainConfig.scorer` or the critic)."""
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
        for name in ("steps", "batch_size", "buffer"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                _fail("LoopVerifierConfig", name, "an integer >= 1", value)
        if not self.lr > 0:
            _fail("LoopVerifierConfig", "lr", "a number > 0", self.lr)
        if not self.unlikelihood_coef >= 0:
            _fail("LoopVerifierConfig", "unlikelihood_coef", "a number >= 0", self.unlikelihood_coef)
        if not 0.0 <= self.min_likelihood < 1.0:
            _fail("LoopVerifierConfig", "min_likelihood", "a number in [0, 1)", self.min_likelihood)
        if self.reduce not in ("min", "mean"):
            _fail("LoopVerifierConfig", "reduce", "one of ['mean', 'min']", self.reduce)


@dataclass
class TrainConfig:
    """Search-guided RL: grow trees, reward leaves, update policy and critic, push weights."""

    model: str = ""
    """Policy model folder (a save_pretrained folder), or a name of planner.policy.local_models.NAMED_MODELS
    ("smollm2", "qwen2.5-coder-0.5b") for scripts/train.py."""
    output_dir: str = "runs/train"
    """Where metrics (metrics.jsonl, metrics.csv, TensorBoard events) and checkpoints go."""
    tree_store: str | None = None
    """Append every iteration's rewarded trees to this JSONL tree store (rl/tree_store.py), tagged with the
    policy version, for DPO, rejection-sampling SFT and the reward model to read later. None: not kept."""
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
    iterations: int = 10
    """Search-train iterations."""
    prompts_per_iteration: int = 8
    """Problems searched per iteration (P): one tree each."""
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
    lr: float = 1e-4
    """AdamW learning rate of the policy."""
    epochs: int = 1
    """Passes over each iteration's batch (K)."""
    minibatches: int = 1
    """Minibatches per epoch; whole groups (prompts) go to one minibatch, so prompts_per_iteration
    must be divisible by it."""
    old_logprobs: Literal["learner", "engine"] = "learner"
    """Log-probabilities of the behaviour policy in the importance ratio: "learner" recomputes them
    with the learner before the update (exact whatever the engine's precision; free with one epoch
    of one minibatch, where the ratio is 1 by definition, else one more forward over the batch),
    "engine" reuses those the engine returned while sampling (no forward; equal to the learner's
    when both run the same weights in float32, as on CPU: the logged engine_learner_logprob_gap is
    then ~1e-5)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
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
    """Dynamic sampling (DAPO): leave out groups whose rewards are all equal (they carry no signal)."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value critic."""
    loop_verifier: LoopVerifierConfig = field(default_factory=LoopVerifierConfig)
    """The loop's own value (rl/loop_verifier.py): a generative verifier trained every iteration on the trees'
    verified-correct leaves; when `loop_verifier.model` is set it values every iteration's search."""
    scorer: str | None = None
    """A scorer folder (`planner.load_scorer`: its scorer.json names the format), e.g. the generative verifier
    that `scripts/lab/verifier_lm.py` trains: it values beam/DVTS/MCTS in every iteration, in place of the verifier
    oracle (first iteration) and the critic (`critic.use_as_scorer`). None: those two."""
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
    token needs only its path, so on small models smaller packs are faster (docs/benchmarks.md,
    "Tree-packed learner"). None: one pack per tree."""
    data_parallel: Literal["ddp", "fsdp"] = "ddp"
    """Launched by torchrun over several ranks (rl/distributed.py): "ddp" keeps a full copy of each model
    per rank and averages gradients; "fsdp" (FSDP2 `fully_shard`) shards parameters, gradients and
    AdamW state over ranks, for models that do not fit one device. No effect in one process."""
    trainable: str | None = None
    """A regular expression: only policy parameters whose name it matches (re.search) are trained; the rest
    are frozen, with no gradient and no AdamW state. A learner that fits a small machine: a 630M-parameter
    policy needs ~10 GB in float32 with AdamW, its last 4 layers ~3.5 GB
    (e.g. "model\\.layers\\.(2[0-3])\\.|model\\.norm" for Qwen2.5-0.5B's 24 layers). None: every parameter."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward instead of storing them (policy and critic): less memory,
    about one more forward of time."""
    micro_batch_tokens: int | None = None
    """Most padded tokens (rows x longest row) per forward/backward; a minibatch's micro-batches
    accumulate into one optimizer step with the same gradient as the whole minibatch. None: one pass."""
    logprob_chunk: int | None = None
    """Compute log-probabilities over this many positions at a time from the trunk's hidden states, so
    no whole-batch float32 logits exist (rl/forward.py). None: the model's own logits."""
    tis_cap: float | None = None
    """Truncated importance sampling (rl/mismatch.py; Yao et al. 2025): each token's surrogate is weighted
    by min(pi_old / mu, tis_cap), mu the distribution the token was drawn from. At search temperature 1, mu
    is the engine's (its log-probabilities; needs old_logprobs="learner", else the weight is 1): the
    engine-learner mismatch. At temperature T != 1, mu = softmax(logits / T) of the weights that sampled,
    which the learner computes before its update (one more forward): the update then learns pi at
    temperature 1 from samples drawn hotter, and a search at T != 1 requires this setting. None: off (the
    mismatch metrics are logged either way)."""
    engine_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """The serving engine's weights: float32 keeps it equal to a float32 learner; bfloat16 is vLLM's
    usual GPU setting (then log the mismatch, and consider tis_cap)."""
    engine_replicas: int = 1
    """Serving engines: 1 = one engine in this process; N > 1 = an engine pool of N replicas as Ray actors
    (planner.policy.EnginePool; a local Ray instance, or the cluster at $RAY_ADDRESS), one CPU (or GPU)
    each. The search is the same; every weight push reaches every replica (docs/scale-out.md)."""
    engine_memory_fraction: float = 0.85
    """vLLM on GPU: the fraction of GPU memory the engine may take (gpu_memory_utilization); the rest is
    the learner's when both share one GPU. Ignored on CPU (the KV cache has a fixed size there)."""
    engine_in_process: bool = False
    """vLLM: run the engine in the trainer's process (no engine-core process): weight pushes hand the
    tensors to the engine directly, on a GPU without a copy through CPU memory."""
    engine_sleep: bool = True
    """vLLM sharing the learner's GPU: sleep (level 1: weights to CPU, KV cache freed) during the
    learner phase, wake for the weight push. No effect on CPU or with the transformers engine."""
    seed: int = 0
    """Seed of everything (problem order, search, minibatches)."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms while the trainer runs: bit-exact reruns and resumes on CPU."""
    threads: int = 1
    """Torch threads of the learner and the engine, while the trainer runs (restored afterwards)."""
    learner_threads: int | None = None
    """Torch threads of the learner's update alone (None: `threads`). Search and update take turns, so on
    CPU the update may use the cores the engine leaves idle: on the demo's trees 2 threads made it
    1.73x faster than 1 on 2 idle cores (docs/benchmarks.md, "Learner threads"). Keep it at 1 when
    other work shares the cores: oversubscribed torch threads can be many times slower."""
    checkpoint_every: int = 5
    """Save a resumable checkpoint every this many iterations (and after the last one)."""
    checkpoints_kept: int = 2
    """Keep this many newest checkpoints (<output_dir>/checkpoints/iteration-N): --resume falls back to an
    older one when the newest is damaged (rl/checkpoint.py)."""
    debug: bool = False
    """Check every iteration that the engine's log-probabilities of the sampled tokens equal the
    learner's within 1e-3 (weights in sync); raise when they do not."""

    def __post_init__(self) -> None:
        for name, kind in (("loss", PolicyLossConfig), ("critic", CriticConfig), ("best_of_n", BestOfNConfig),
                           ("beam", BeamConfig), ("dvts", DVTSConfig), ("mcts", MCTSConfig)):
            if isinstance(getattr(self, name), dict):
                setattr(self, name, kind(**getattr(self, name)))
        if self.backend not in ("hf", "vllm"):
            _fail("TrainConfig", "backend", "one of ['hf', 'vllm']", self.backend)
        if self.strategy not in TREE_STRATEGIES:
            _fail("TrainConfig", "strategy", f"one of {list(TREE_STRATEGIES)}", self.strategy)
        if self.estimator not in ADVANTAGE_ESTIMATORS:
            _fail("TrainConfig", "estimator", f"one of {sorted(ADVANTAGE_ESTIMATORS)}", self.estimator)
        if self.estimator in NEEDS_CRITIC and self.critic.enabled is False:
            raise ValueError(f"TrainConfig.estimator={self.estimator!r} needs the critic: set critic.enabled=True")
        if self.critic.enabled is not False and self.critic.target == "gae" and self.estimator != "gae":
            raise ValueError("TrainConfig: critic.target='gae' regresses GAE returns, which only estimator='gae' "
                             f"computes; got estimator={self.estimator!r}: set critic.target='tree' or estimator='gae'")
        for name in ("iterations", "prompts_per_iteration", "epochs", "minibatches", "threads", "checkpoint_every",
                     "checkpoints_kept", "engine_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                _fail("TrainConfig", name, "an integer >= 1", value)
        if self.prompts_per_iteration % self.minibatches:
            raise ValueError(f"TrainConfig: the batch of prompts_per_iteration={self.prompts_per_iteration} prompts "
                             f"is not divisible into minibatches={self.minibatches}; pick a divisor")
        if not self.lr > 0:
            _fail("TrainConfig", "lr", "a number > 0", self.lr)
        if not self.search.temperature > 0:
            _fail("TrainConfig", f"{self.strategy}.temperature", "a number > 0 (training samples)",
                  self.search.temperature)
        if self.old_logprobs not in ("learner", "engine"):
            _fail("TrainConfig", "old_logprobs", "one of ['engine', 'learner']", self.old_logprobs)
        if self.kl_placement not in ("loss", "reward"):
            _fail("TrainConfig", "kl_placement", "one of ['loss', 'reward']", self.kl_placement)
        if self.kl_reward_coef < 0:
            _fail("TrainConfig", "kl_reward_coef", "a number >= 0", self.kl_reward_coef)
        if not self.progress_coef >= 0:
            _fail("TrainConfig", "progress_coef", "a number >= 0", self.progress_coef)
        if self.loss.kl_kind not in KL_ESTIMATORS:
            _fail("TrainConfig", "loss.kl_kind", f"one of {list(KL_ESTIMATORS)}", self.loss.kl_kind)
        self._check_learner_options()
        check_output_dir(self.output_dir, "TrainConfig.output_dir")  # before any work, not at the first write
        if self.tree_store is not None:
            check_output_file(self.tree_store, "TrainConfig.tree_store")

    def _check_learner_options(self) -> None:
        check_precision("TrainConfig", self.dtype, self.device)
        if self.trainable is not None:
            import re
            try:
                re.compile(self.trainable)
            except re.error as error:
                _fail("TrainConfig", "trainable", f"a regular expression or None ({error})", self.trainable)
        if self.engine_dtype not in ("float32", "bfloat16", "float16"):
            _fail("TrainConfig", "engine_dtype", "one of ['bfloat16', 'float16', 'float32']", self.engine_dtype)
        for name in ("micro_batch_tokens", "logprob_chunk", "pack_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
                _fail("TrainConfig", name, "an integer >= 2 or None", value)
        if self.learner_threads is not None and (not isinstance(self.learner_threads, int)
                                                 or isinstance(self.learner_threads, bool) or self.learner_threads < 1):
            _fail("TrainConfig", "learner_threads", "an integer >= 1 or None", self.learner_threads)
        if self.loop_verifier.model and self.scorer:
            raise ValueError("TrainConfig: scorer and loop_verifier.model both name the value that guides the search; "
                             "set one of them")
        temperature = self.search.temperature
        if temperature != 1.0 and self.tis_cap is None:
            raise ValueError(f"TrainConfig: {self.strategy}.temperature={temperature} samples from softmax(logits / "
                             f"{temperature}), not from the policy the update trains, so the update is off-policy: "
                             "set tis_cap (e.g. 2.0) to correct it with truncated importance weights, or sample "
                             f"at {self.strategy}.temperature=1.0")
        if self.tis_cap is not None:
            if not self.tis_cap >= 1:
                _fail("TrainConfig", "tis_cap", "a number >= 1 or None", self.tis_cap)
            if self.old_logprobs != "learner" and temperature == 1.0:
                raise ValueError("TrainConfig.tis_cap weighs tokens by pi_learner_old / pi_engine, so it needs "
                                 "old_logprobs='learner' (with 'engine' there is no learner log-probability to "
                                 "compare): set old_logprobs='learner' or tis_cap=None")
        if self.data_parallel not in ("ddp", "fsdp"):
            _fail("TrainConfig", "data_parallel", "one of ['ddp', 'fsdp']", self.data_parallel)
        if not 0 < self.engine_memory_fraction < 1:
            _fail("TrainConfig", "engine_memory_fraction", "a number in (0, 1)", self.engine_memory_fraction)

    @property
    def trains_critic(self) -> bool:
        """Whether the learner builds and trains a critic (see `CriticConfig.enabled`)."""
        if self.critic.enabled is not None:
            return self.critic.enabled
        guides = (self.critic.use_as_scorer and self.strategy != "best_of_n" and not self.scorer
                  and not self.loop_verifier.model)
        return self.estimator in NEEDS_CRITIC or guides

    @property
    def search(self) -> SearchConfig:
        """The settings of the chosen strategy (the field named by `strategy`)."""
        return getattr(self, self.strategy)

    @property
    def uses_reference(self) -> bool:
        return self.loss.kl_coef > 0 or (self.kl_placement == "reward" and self.kl_reward_coef > 0)

    @property
    def response_tokens(self) -> int:
        """Most tokens of one whole response under the chosen strategy (best_of_n's max_tokens, or a
        step strategy's max_step_tokens * max_steps)."""
        search = self.search
        return search.max_tokens if isinstance(search, BestOfNConfig) else search.max_step_tokens * search.max_steps
