"""The embedded task's cold start: a tiny Llama SFT-trained on the gold arithmetic traces of a few problems.

DeepSeek-R1 (DeepSeek-AI 2025, section 2.3.1) starts RL from a "cold start": a short SFT on long
chain-of-thought examples in the `<think>...</think>` format. `cold_start` is that stage for the
embedded default: a ~1M-parameter Llama trained (`rl.sft.train_sft`) on generated arithmetic traces
(`verifiers.arithmetic`). In the RLVR setting (the demo's default) it sees the traces of a fixed gold
budget of problems and trains to its best validation pass@1 (early stopping); the budget, not an early
stop, leaves room for search and RL. The older mode stops as soon as sampled pass@1 reaches
`target_pass_range` (the teacher comparison of docs/results.md). `pass_rates` measures pass@1 (with its
interval) and pass@k.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from planner.policy.types import SamplingParams
from planner.scaling_report import bootstrap_interval
from rl.runtime import torch_settings
from rl.sft import SFTConfig, train_sft
from verifiers.arithmetic import (ARITHMETIC_ALPHABET, REDO_PASSES, self_correction_solution, training_problems,
                                  validation_problems)
from verifiers.tasks import reward

if TYPE_CHECKING:
    from verifiers.arithmetic import Difficulty

__all__ = ["ColdStartResult", "COLD_START_SFT", "GOLD_BUDGET_SFT", "pass_rates", "cold_start"]


@dataclass
class ColdStartResult:
    """What `cold_start` did: where the model is, the learning curve and the skill it stopped at."""

    model_dir: Path
    """The trained `save_pretrained` folder (model, char tokenizer, chat template, history)."""
    curve: list[dict]
    """One row per evaluation: step, seconds (wall since training began), loss (mean since the previous
    row), lr, pass@1 (sampled at T=1 on the held-out set)."""
    steps: int
    seconds: float
    """Wall time of building, training and the periodic evaluations (the final evaluation excluded)."""
    cpu_seconds: float
    """CPU time of this process over the same span: about the wall time on an idle core when threads=1,
    so it stays comparable when other work shares the machine."""
    in_range: bool
    """Whether the sampled validation pass@1 of the kept weights lies in the target range."""
    best_step: int | None = None
    """With early stopping: the step of the kept weights (the best validation pass@1)."""
    final: dict = field(default_factory=dict)
    """On the held-out set after training (when final_eval): greedy pass@1, sampled pass@1, pass@k."""


COLD_START_SFT = SFTConfig(lr=3e-3, batch_size=32, max_steps=700, warmup_steps=20, schedule="cosine",
                           min_lr_ratio=0.05, eval_every=25)
"""The cold start's SFT settings: the recipe AdamW lr 3e-3 at batch 32, which reached the target
on fewer examples than batch 64 or 16 (docs/benchmarks.md, "Cold start"), with a cosine decay over 700
steps (~4 min on an idle core). Training normally stops on the pass-rate target before max_steps."""


GOLD_BUDGET_SFT = replace(COLD_START_SFT, max_steps=3000, eval_every=50, best_metric="pass@1", patience=6)
"""The cold start of the RLVR setting: the same recipe trained to its best validation pass@1 on a fixed gold
budget, stopped after 6 evaluations (300 steps) without a new best and restored to the best one."""


def pass_rates(policy, problems: Sequence, reward_fn: Callable[[str, object], float], *, n: int = 1,
               temperature: float = 1.0, max_tokens: int = 64, seed: int = 0) -> dict[str, float]:
    """Sample `n` responses per problem; return pass@1 (mean reward) with its 95% interval
    ("pass@1_low", "pass@1_high": percentile bootstrap over problems, `planner.scaling_report`) and
    pass@n (share solved at least once).

    pass@1 averages over all n samples, the unbiased estimate (Chen et al. 2021) with lower variance
    than one sample per problem. `reward_fn(text, problem)` grades a response (a task's `reward`).
    """

    prompts = [policy.encode_prompt(p.question) for p in problems]
    groups = policy.generate(prompts, SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens,
                                                     seed=seed))
    rewards = [[reward_fn(s.text, p) for s in group] for p, group in zip(problems, groups)]  # (problems, n)
    low, high = bootstrap_interval([[row[k] for row in rewards] for k in range(n)])
    return {"pass@1": sum(map(sum, rewards)) / (n * len(problems)), "pass@1_low": low, "pass@1_high": high,
            f"pass@{n}": sum(any(r > 0 for r in row) for row in rewards) / len(problems)}


def cold_start(output_dir: str | os.PathLike, *, difficulty: str | Difficulty = "medium",
               target_pass_range: tuple[float, float] | None = (0.3, 0.6), max_minutes: float = 5.0,
               config: SFTConfig | None = None, hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
               num_train: int = 20_000, eval_problems: int = 128, eval_samples: int = 2, final_eval: bool = True,
               final_samples: int = 8, self_correction: float = 0.0, seed: int = 0,
               progress: bool = True) -> ColdStartResult:
    """Build a small Llama for the arithmetic task and SFT it on the gold traces of `num_train` problems.

    self_correction: the fraction of training traces that are s1-style self-correction traces (one to
    three whole passes, some with a slip, each followed by "Wait", then the correct pass;
    `verifiers.arithmetic.self_correction_solution`), so that budget forcing's "Wait" means something to
    the model.

    Every `config.eval_every` steps (default `COLD_START_SFT`) the sampled (T=1) pass@1 on a fixed
    validation set of `eval_problems` problems (`eval_samples` samples each) is measured. With
    `target_pass_range` training stops as soon as it reaches `target_pass_range[0]`; with None it trains to
    its best validation pass@1 (early stopping: `config.patience` evaluations without a new best, default
    `GOLD_BUDGET_SFT`) and keeps those weights. `max_minutes` only bounds a stuck run. The validation set is
    the arithmetic "validation" split (its seed plus `seed`); it and the "test" split's problems are kept
    out of the `num_train` training problems, the gold budget. `difficulty`: a name in
    `verifiers.arithmetic.DIFFICULTIES` or a `Difficulty`. Torch threads: `config.threads` (1).
    """
    from planner.policy.hf import HFPolicy
    from planner.policy.local_models import build_char_tokenizer, build_tiny_llama
    from transformers import AutoModelForCausalLM

    if not 0.0 <= self_correction <= 1.0:
        raise ValueError(f"self_correction must be a fraction in [0, 1]; got {self_correction!r}")
    low, high = target_pass_range or (0.0, 1.0)
    if not 0 <= low <= high <= 1:
        raise ValueError(f"target_pass_range must be (low, high) with 0 <= low <= high <= 1; got {target_pass_range!r}")
    config = config or (COLD_START_SFT if target_pass_range else GOLD_BUDGET_SFT)
    if target_pass_range is None and config.best_metric is None:
        config = replace(config, best_metric="pass@1", patience=config.patience or GOLD_BUDGET_SFT.patience)
    config = replace(config, max_minutes=max_minutes, seed=seed, progress=progress)
    if config.eval_every < 1:
        raise ValueError(f"cold_start needs config.eval_every >= 1 to watch the pass rate; got {config.eval_every}")
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch_settings(config.threads):
        held_out = validation_problems(eval_problems, difficulty, seed_offset=seed)
        train = training_problems(num_train, difficulty, seed=seed, exclude={p.question for p in held_out})
        # one token per character, + slack; a self-correcting trace writes up to 1 + REDO_PASSES passes
        passes = 1 + REDO_PASSES if self_correction else 1
        max_tokens = passes * max(len(p.meta["solution"]) for p in held_out) + 8
        traces = random.Random(seed)  # which traces correct themselves, and how
        pairs = [(p.question, self_correction_solution(p, traces) if traces.random() < self_correction
                  else p.meta["solution"]) for p in train]
        output_dir = Path(output_dir)
        build_tiny_llama(output_dir, alphabet=ARITHMETIC_ALPHABET, hidden_size=hidden_size, num_layers=num_layers,
                         num_heads=num_heads, seed=seed)
        model = AutoModelForCausalLM.from_pretrained(output_dir, dtype=torch.float32)
        tokenizer = build_char_tokenizer(ARITHMETIC_ALPHABET)

        def policy_of(model) -> HFPolicy:
            return HFPolicy(str(output_dir), model=model, tokenizer=tokenizer,
                            device=str(next(model.parameters()).device), seed=seed)

        def evaluate(step, model, tokenizer) -> dict[str, float]:
            rates = pass_rates(policy_of(model), held_out, reward, n=eval_samples, max_tokens=max_tokens, seed=seed)
            return {"pass@1": rates["pass@1"]}

        stop = (lambda m: m["pass@1"] >= low) if target_pass_range else None
        result = train_sft(model, pairs, config, tokenizer=tokenizer, output_dir=output_dir, eval_fn=evaluate,
                           should_stop=stop)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        kept = [row for row in result.history if row["step"] == result.best_step] or result.history[-1:]
        last = kept[0]["pass@1"] if kept else 0.0
        final = {}
        if final_eval:
            policy = policy_of(result.model)
            greedy = pass_rates(policy, held_out, reward, n=1, temperature=0.0, max_tokens=max_tokens, seed=seed)
            sampled = pass_rates(policy, held_out, reward, n=final_samples, max_tokens=max_tokens, seed=seed + 1)
            final = {"greedy_pass@1": greedy["pass@1"], "sampled_pass@1": sampled["pass@1"],
                     f"pass@{final_samples}": sampled[f"pass@{final_samples}"]}
    return ColdStartResult(model_dir=output_dir, curve=result.history, steps=result.steps, seconds=seconds,
                           cpu_seconds=cpu_seconds, in_range=low <= last <= high, final=final,
                           best_step=result.best_step)
