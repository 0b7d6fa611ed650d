"""Supervised fine-tuning on prompt/response pairs, and the embedded task's cold start.

DeepSeek-R1 (DeepSeek-AI 2025, section 2.3.1) starts RL from a "cold start": a short SFT on a
few thousand long chain-of-thought examples in the `<think>...</think>` format, so that RL begins
from a policy that already writes readable, well-formed traces. `train_sft` is that stage for any
Hugging Face causal LM: the loss is the token-mean negative log-likelihood of the response tokens
only (the prompt, encoded with the tokenizer's chat template, is context, not a target).

The embedded default's cold start (a tiny Llama stopped at partial skill) is `scripts/lab/cold_start.py`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, get_args

import torch
from tqdm.auto import tqdm

from rl.losses import is_finite_loss, sequence_logprobs, sft_loss
from rl.runtime import autocast, check_precision, resolve_device, torch_settings

__all__ = ["SFTConfig", "SFTResult", "EvalFn", "StopFn", "load_pairs", "encode_pair", "collate", "response_nll",
           "lr_factor", "train_sft"]

Schedule = Literal["cosine", "linear", "constant"]
SCHEDULES: tuple[str, ...] = get_args(Schedule)
EvalFn = Callable[[int, "torch.nn.Module", object], Mapping[str, float]]
"""`eval_fn(step, model, tokenizer) -> metrics`, called every `eval_every` steps (model in eval mode)."""
StopFn = Callable[[Mapping[str, float]], bool]
"""`should_stop(metrics) -> bool` on each evaluation's metrics; True ends training (and saves)."""
Pair = tuple[str, str]


@dataclass
class SFTConfig:
    """Settings of `train_sft`. Validated on construction; errors name the allowed range and the value."""

    lr: float = 3e-3
    """Peak AdamW learning rate (> 0). 3e-3 suits the ~1M-parameter embedded model (measured, see
    docs/benchmarks.md); pretrained models want ~1e-5 to 1e-4."""
    batch_size: int = 64
    """Sequences per optimizer step (>= 1)."""
    max_steps: int = 1000
    """Optimizer steps (>= 1); the data is reshuffled every epoch and cycled until then."""
    warmup_steps: int = 20
    """Steps of linear warm-up from 0 to `lr` (>= 0)."""
    schedule: Schedule = "cosine"
    """Decay after warm-up down to `min_lr_ratio * lr` at `max_steps`: "cosine" (Loshchilov & Hutter
    2017), "linear", or "constant" (no decay: for runs stopped by a metric, not by max_steps)."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a fraction of `lr`, in [0, 1]."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay (Loshchilov & Hutter 2019) on matrices only, not norms (>= 0)."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas, each in [0, 1)."""
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this (> 0); None disables clipping."""
    max_length: int | None = None
    """Truncate prompt + response to this many tokens (>= 2); None keeps whole sequences."""
    seed: int = 0
    """Seeds the data order (torch.Generator); the model's initialisation is the caller's."""
    eval_every: int = 0
    """Call `eval_fn` every this many steps (>= 0; 0 never)."""
    max_minutes: float | None = None
    """Stop after this much wall time (> 0), evaluations included; None: no limit. A safety bound for a
    stuck run: a run stopped by wall time gives different models on slower machines, so recipes stop by
    steps, `should_stop` or `patience`."""
    best_metric: str | None = None
    """Early stopping (Prechelt 1998, "Early Stopping - But When?"): the `eval_fn` metric to maximise,
    measured on data kept out of training (a validation split). Training ends with the weights of the
    evaluation where it was highest (ties: the earlier one); None keeps the last weights."""
    patience: int | None = None
    """With best_metric: stop after this many evaluations in a row without a new best (>= 1); None trains
    to max_steps and still restores the best weights."""
    device: str | None = None
    """Train on this device ("cpu", "cuda", "auto": CUDA when available); None keeps the model where it
    is (a folder loads on the CPU)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Precision: "float32", or "bfloat16" = autocast with float32 master weights and AdamW state
    (rl/runtime.py). bfloat16 needs a GPU or a CPU with bf16 instructions."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward instead of storing them: less memory, about one more
    forward of time."""
    threads: int | None = 1
    """torch CPU threads during training (>= 1), restored afterwards; None leaves the setting alone.
    One thread by default: two threads on two busy cores can be many times slower."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"SFTConfig.{name} must be {allowed}; got {getattr(self, name)!r}")

        def number(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

        check(number(self.lr) and self.lr > 0, "lr", "a finite number > 0")
        check(isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size", "an integer >= 1")
        check(isinstance(self.max_steps, int) and self.max_steps >= 1, "max_steps", "an integer >= 1")
        check(isinstance(self.warmup_steps, int) and self.warmup_steps >= 0, "warmup_steps", "an integer >= 0")
        check(self.schedule in SCHEDULES, "schedule", f"one of {SCHEDULES}")
        check(number(self.min_lr_ratio) and 0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "a number in [0, 1]")
        check(number(self.weight_decay) and self.weight_decay >= 0, "weight_decay", "a number >= 0")
        check(len(self.betas) == 2 and all(number(b) and 0 <= b < 1 for b in self.betas), "betas",
              "two numbers in [0, 1)")
        check(self.grad_clip is None or (number(self.grad_clip) and self.grad_clip > 0), "grad_clip",
              "None or a number > 0")
        check(self.max_length is None or (isinstance(self.max_length, int) and self.max_length >= 2),
              "max_length", "None or an integer >= 2")
        check(isinstance(self.seed, int), "seed", "an integer")
        check(isinstance(self.eval_every, int) and self.eval_every >= 0, "eval_every", "an integer >= 0")
        check(self.max_minutes is None or (number(self.max_minutes) and self.max_minutes > 0), "max_minutes",
              "None or a number > 0")
        check(self.best_metric is None or isinstance(self.best_metric, str), "best_metric", "None or a metric name")
        check(self.patience is None or (isinstance(self.patience, int) and self.patience >= 1
                                        and self.best_metric is not None), "patience",
              "None or an integer >= 1 together with best_metric")
        check(self.device is None or isinstance(self.device, str), "device", "None or a device name like 'cpu'")
        check_precision("SFTConfig", self.dtype, self.device)
        check(self.threads is None or (isinstance(self.threads, int) and self.threads >= 1), "threads",
              "None or an integer >= 1")


@dataclass
class SFTResult:
    """What `train_sft` did."""

    model: "torch.nn.Module"
    tokenizer: object
    steps: int
    """Optimizer steps taken."""
    seconds: float
    """Wall time of the whole run, evaluations and saving included."""
    stopped_by: Literal["max_steps", "max_minutes", "should_stop", "patience"]
    losses: list[float] = field(default_factory=list)
    """Training loss of every step."""
    history: list[dict] = field(default_factory=list)
    """One row per evaluation: step, seconds, loss (mean since the previous row), lr, and eval metrics."""
    best_step: int | None = None
    """With `SFTConfig.best_metric`: the step whose weights the model holds (its best evaluation)."""


# ----------------------------------------------------------------------------- data


def load_pairs(path: str | os.PathLike) -> list[Pair]:
    """(prompt, response) pairs from a JSONL file of `{"prompt": ..., "response": ...}` objects."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT data file {str(path)!r} does not exist; pass a JSONL file with one "
                                '{"prompt": ..., "response": ...} object per line')
    pairs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) \
                    or not isinstance(row.get("response"), str):
                raise ValueError(f"{path}:{number}: expected an object with string fields 'prompt' and "
                                 f"'response'; got {line.strip()[:80]!r}")
            pairs.append((row["prompt"], row["response"]))
    return pairs


def _is_token_pair(item) -> bool:
    return isinstance(item, Mapping) and "prompt_ids" in item


def _as_pairs(data) -> list:
    if isinstance(data, (str, os.PathLike)):
        pairs = load_pairs(data)
    else:
        pairs = [d if _is_token_pair(d) else (d["prompt"], d["response"]) if isinstance(d, Mapping) else (d[0], d[1])
                 for d in data]
    if not pairs:
        raise ValueError("SFT data is empty: pass at least one (prompt, response) pair or a non-empty JSONL file")
    return pairs


def _encode(tokenizer, item, max_length: int | None) -> tuple[list[int], int]:
    """`encode_pair` of a text pair; a token pair ({"prompt_ids", "response_ids"}: ids a policy sampled,
    rejection-sampling SFT's data) is trained on as it is, never re-encoded from its text."""
    if not _is_token_pair(item):
        return encode_pair(tokenizer, *item, max_length)
    ids = list(item["prompt_ids"]) + list(item["response_ids"])
    return (ids[:max_length] if max_length else ids), len(item["prompt_ids"])


def encode_pair(tokenizer, prompt: str, response: str, max_length: int | None = None) -> tuple[list[int], int]:
    """Token ids of prompt + response + EOS, and how many of them are the prompt.

    The prompt goes through the tokenizer's chat template (with the generation prompt) when it has
    one, exactly as `Policy.encode_prompt` does at inference; otherwise it is encoded as plain text.
    """
    if getattr(tokenizer, "chat_template", None):
        prompt_ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                   add_generation_prompt=True, tokenize=True)
        if isinstance(prompt_ids, Mapping) or hasattr(prompt_ids, "input_ids"):  # BatchEncoding
            prompt_ids = prompt_ids["input_ids"]
    else:
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
    ids = list(prompt_ids) + tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
    if max_length is not None and len(prompt_ids) >= max_length:
        raise ValueError(f"a prompt of {len(prompt_ids)} tokens leaves no room for the response within "
                         f"max_length={max_length}: {prompt[:60]!r}")
    return ids[:max_length] if max_length else ids, len(prompt_ids)


def collate(encoded: Sequence[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input_ids (B, L), attention_mask (B, L) and loss_mask (B, L): 1 on response tokens."""
    B, L = len(encoded), max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    loss_mask = torch.zeros((B, L), dtype=torch.float32)
    for i, (ids, prompt_len) in enumerate(encoded):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        attention_mask[i, :len(ids)] = 1
        loss_mask[i, prompt_len:len(ids)] = 1.0
    return input_ids, attention_mask, loss_mask


def response_nll(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Token-mean NLL of the response tokens: logits (B, L, V) predict input_ids (B, L) shifted by one."""
    next_logits = logits[:, :-1, :]  # (B, L-1, V): position t predicts token t+1
    targets = input_ids[:, 1:]  # (B, L-1)
    target_mask = loss_mask[:, 1:]  # (B, L-1): only response tokens are targets
    target_logp = sequence_logprobs(next_logits, targets)  # (B, L-1)
    return sft_loss(target_logp, target_mask)


def lr_factor(step: int, config: SFTConfig) -> float:
    """Learning-rate multiplier at `step` (0-based): linear warm-up, then the configured decay."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if config.schedule == "cosine" else 1 - progress
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * decay


# ----------------------------------------------------------------------------- the trainer


def train_sft(model, data, config: SFTConfig | None = None, *, tokenizer=None,
              output_dir: str | os.PathLike | None = None, eval_fn: EvalFn | None = None,
              should_stop: StopFn | None = None) -> SFTResult:
    """Fine-tune a causal LM on (prompt, response) pairs with the loss on the response tokens only.

    model: a Hugging Face folder, or a loaded `PreTrainedModel` (then `tokenizer` is required).
    data: a JSONL path, or pairs as `(prompt, response)` tuples or `{"prompt", "response"}` dicts, or
    sampled token ids as `{"prompt_ids", "response_ids"}` dicts (trained on as they are: the response ids
    must carry their own end-of-sequence id).
    output_dir: when given, the model, tokenizer and `sft_history.json` are saved there at the end
    (a `save_pretrained` folder that `planner.policy.load_policy(folder, "hf")` and vLLM load).
    eval_fn / should_stop: see `EvalFn` / `StopFn`; training stops early when `should_stop` says so.
    """
    config = config or SFTConfig()
    pairs = _as_pairs(data)
    if isinstance(model, (str, os.PathLike)):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not (Path(model) / "config.json").is_file():
            raise FileNotFoundError(f"no model folder at {str(model)!r} (expected a config.json there)")
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    elif tokenizer is None:
        raise ValueError("train_sft: pass tokenizer= along with an in-memory model")
    encoded = [_encode(tokenizer, item, config.max_length) for item in pairs]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if config.device is not None:
        model.to(resolve_device(config.device))
    device = next(model.parameters()).device
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False

    with torch_settings(config.threads):
        return _train_loop(model, tokenizer, encoded, pad_id, device, config, output_dir, eval_fn, should_stop)


def _train_loop(model, tokenizer, encoded, pad_id, device, config, output_dir, eval_fn, should_stop) -> SFTResult:
    matrices = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    others = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": config.weight_decay},
                                   {"params": others, "weight_decay": 0.0}], lr=config.lr, betas=config.betas)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, config))
    generator = torch.Generator().manual_seed(config.seed)
    order: list[int] = []
    start = time.perf_counter()
    losses: list[float] = []
    history: list[dict] = []
    stopped_by, logged_upto, step = "max_steps", 0, 0
    best: tuple[float, int, dict] | None = None  # (metric, step, weights) of the best evaluation so far
    bar = tqdm(total=config.max_steps, desc="sft", disable=not config.progress, leave=False)
    model.train()
    while step < config.max_steps:
        if len(order) < config.batch_size:  # a new epoch: reshuffle (a short tail carries over)
            order += torch.randperm(len(encoded), generator=generator).tolist()
        batch, order = [encoded[i] for i in order[:config.batch_size]], order[config.batch_size:]
        input_ids, attention_mask, loss_mask = (t.to(device) for t in collate(batch, pad_id))
        with autocast(device, config.dtype):
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, L, V)
        loss = response_nll(logits, input_ids, loss_mask)
        if not is_finite_loss(loss):
            raise FloatingPointError(f"SFT loss is {loss.item()} at step {step + 1}: training diverged; "
                                     f"lower SFTConfig.lr (now {config.lr}) or set grad_clip")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        if eval_fn is not None and config.eval_every and step % config.eval_every == 0:
            model.eval()
            with torch.no_grad():
                metrics = dict(eval_fn(step, model, tokenizer))
            model.train()
            window = losses[logged_upto:]
            history.append({"step": step, "seconds": time.perf_counter() - start, "loss": sum(window) / len(window),
                            "lr": scheduler.get_last_lr()[0], **metrics})
            logged_upto = step
            if config.best_metric is not None:
                if config.best_metric not in metrics:
                    raise KeyError(f"SFTConfig.best_metric is {config.best_metric!r}, but eval_fn returned "
                                   f"only {sorted(metrics)}; name one of those")
                if best is None or metrics[config.best_metric] > best[0]:
                    best = (metrics[config.best_metric], step, _cpu_copy(model.state_dict()))
                elif config.patience is not None and (step - best[1]) // config.eval_every >= config.patience:
                    stopped_by = "patience"
                    break
            if should_stop is not None and should_stop(metrics):
                stopped_by = "should_stop"
                break
        if config.max_minutes is not None and time.perf_counter() - start > 60 * config.max_minutes:
            stopped_by = "max_minutes"
            break
    bar.close()
    model.eval()
    if best is not None:
        model.load_state_dict(best[2])
    if output_dir is not None:
        output_dir = Path(output_dir)
        model.save_pretrained(output_dir, safe_serialization=True)
        tokenizer.save_pretrained(output_dir)
        (output_dir / "sft_history.json").write_text(json.dumps({"config": asdict(config), "losses": losses,
                                                                  "history": history, "stopped_by": stopped_by,
                                                                  "best_step": best[1] if best else None},
                                                                 indent=1))
    return SFTResult(model=model, tokenizer=tokenizer, steps=step, seconds=time.perf_counter() - start,
                     stopped_by=stopped_by, losses=losses, history=history,
                     best_step=best[1] if best is not None else None)


def _cpu_copy(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy of a state dict that later optimizer steps do not change."""
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state.items()}
