"""The embedded task's cold start: a tiny Llama SFT-trained on arithmetic traces until partly skilled.

DeepSeek-R1 (DeepSeek-AI 2025, section 2.3.1) starts RL from a "cold start": a short SFT on long
chain-of-thought examples in the `<think>...</think>` format. `cold_start` is that stage for the
embedded default: a ~1M-parameter Llama trained (`rl.sft.train_sft`) on generated arithmetic traces
(`verifiers.arithmetic`) that stops on purpose at partial skill (sampled pass@1 in
`target_pass_range`), because search and RL need room to improve: the gap between pass@1 and
pass@k is what they can win. `pass_rates` measures pass@1 (with its interval) and pass@k.
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
from verifiers.arithmetic import ARITHMETIC_ALPHABET, REDO_PASSES, SPLITS, arithmetic_task, self_correction_solution
from verifiers.tasks import reward

if TYPE_CHECKING:
    from verifiers.arithmetic import Difficulty

__all__ = ["ColdStartResult", "COLD_START_SFT", "pass_rates", "cold_start"]


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
    """Whether the last evaluated sampled pass@1 lies in the target range."""
    final: dict = field(default_factory=dict)
    """On the held-out set after training (when final_eval): greedy pass@1, sampled pass@1, pass@k."""


COLD_START_SFT = SFTConfig(lr=3e-3, batch_size=32, max_steps=700, warmup_steps=20, schedule="cosine",
                           min_lr_ratio=0.05, eval_every=25)
"""The cold start's SFT settings: the recipe AdamW lr 3e-3 at batch 32, which reached the target
on fewer examples than batch 64 or 16 (docs/benchmarks.md, "Cold start"), with a cosine decay over 700
steps (~4 min on an idle core). Training normally stops on the pass-rate target before max_steps."""


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
               target_pass_range: tuple[float, float] = (0.3, 0.6), max_minutes: float = 5.0,
               config: SFTConfig | None = None, hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
               num_train: int = 20_000, eval_problems: int = 128, eval_samples: int = 2, final_eval: bool = True,
               final_samples: int = 8, self_correction: float = 0.0, seed: int = 0,
               progress: bool = True) -> ColdStartResult:
    """Build a small Llama for the arithmetic task and SFT it on gold traces until it is partly skilled.

    self_correction: the fraction of training traces that are s1-style self-correction traces (one to
    three whole passes, some with a slip, each followed by "Wait", then the correct pass;
    `verifiers.arithmetic.self_correction_solution`), so that budget forcing's "Wait" means something to
    the model.

    Every `config.eval_every` steps (default `COLD_START_SFT`) the sampled (T=1) pass@1 on a fixed
    held-out set of `eval_problems` problems (`eval_samples` samples each) is measured; training
    stops as soon as it reaches `target_pass_range[0]` (or after `max_minutes`). The held-out set is
    the arithmetic "test" split (its seed plus `seed`; with the defaults exactly
    `load_arithmetic(split="test")`), removed from the training problems. `difficulty`: a name in
    `verifiers.arithmetic.DIFFICULTIES` or a `Difficulty`. Torch threads: `config.threads` (1).
    """
    from planner.policy.hf import HFPolicy
    from planner.policy.local_models import build_char_tokenizer, build_tiny_llama
    from transformers import AutoModelForCausalLM

    if not 0.0 <= self_correction <= 1.0:
        raise ValueError(f"self_correction must be a fraction in [0, 1]; got {self_correction!r}")
    low, high = target_pass_range
    if not 0 <= low <= high <= 1:
        raise ValueError(f"target_pass_range must be (low, high) with 0 <= low <= high <= 1; got {target_pass_range!r}")
    config = replace(config or COLD_START_SFT, max_minutes=max_minutes, seed=seed, progress=progress)
    if config.eval_every < 1:
        raise ValueError(f"cold_start needs config.eval_every >= 1 to watch the pass rate; got {config.eval_every}")
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch_settings(config.threads):
        held_out = arithmetic_task(eval_problems, difficulty, seed=SPLITS["test"][1] + seed)
        held_out_questions = {p.question for p in held_out}
        train = [p for p in arithmetic_task(num_train, difficulty, seed=seed) if p.question not in held_out_questions]
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

        result = train_sft(model, pairs, config, tokenizer=tokenizer,
                           output_dir=output_dir, eval_fn=evaluate, should_stop=lambda m: m["pass@1"] >= low)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        last = result.history[-1]["pass@1"] if result.history else 0.0
        final = {}
        if final_eval:
            policy = policy_of(result.model)
            greedy = pass_rates(policy, held_out, reward, n=1, temperature=0.0, max_tokens=max_tokens, seed=seed)
            sampled = pass_rates(policy, held_out, reward, n=final_samples, max_tokens=max_tokens, seed=seed + 1)
            final = {"greedy_pass@1": greedy["pass@1"], "sampled_pass@1": sampled["pass@1"],
                     f"pass@{final_samples}": sampled[f"pass@{final_samples}"]}
    return ColdStartResult(model_dir=output_dir, curve=result.history, steps=result.steps, seconds=seconds,
                           cpu_seconds=cpu_seconds, in_range=low <= last <= high, final=final)
