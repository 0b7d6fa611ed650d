"""The transformers backend: the reference implementation of the policy interface (CPU or GPU).

A plain batched sampling loop over a KV cache, written out so that every detail the learner relies
on is explicit: the behaviour log-probability of each sampled token is the raw (temperature 1)
log-softmax, stop strings end a step at the first token whose decoded text completes one (the same
rule vLLM applies), and finished rows leave the batch so short steps do not pay for long ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from planner.policy.base import NamedTensors, Policy
from planner.policy.scoped import torch_threads
from planner.policy.types import Sample, SamplingParams

PAD_POSITION = 0
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
"""Where a transformers config keeps the context length, in the order they are looked for."""


def context_length_of(config) -> int | None:
    """A transformers config's context length (the first of `CONTEXT_KEYS` it has), or None."""
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class HFPolicy(Policy):
    backend = "hf"

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str | None = None, seed: int = 0,
                 max_batch_size: int = 256, threads: int | None = None, model=None, tokenizer=None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(seed)
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None; got {threads!r}")
        self.threads = threads
        """torch CPU threads inside this policy's own forward passes (None: the process's setting)."""
        self.model_path = str(model_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).eval()
        self.model = model.to(self.device)  # a given model (a learner's) keeps its mode; generation runs in eval
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        self.context_length = context_length_of(self.model.config)
        self.max_batch_size = max_batch_size
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        eos = gen_eos if gen_eos is not None else self.tokenizer.eos_token_id
        self._eos = set(eos) if isinstance(eos, list) else {eos} if eos is not None else set()
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def load_weights(self, named_tensors: NamedTensors) -> None:
        items = named_tensors.items() if hasattr(named_tensors, "items") else named_tensors
        state = self.model.state_dict()
        with torch.no_grad():
            for name, tensor in items:
                if name not in state:
                    raise KeyError(f"load_weights: the model has no parameter {name!r}; "
                                   f"names look like {next(iter(state))!r}")
                state[name].copy_(tensor.to(state[name].device, state[name].dtype))

    def _generate(self, prompts, params, seed):
        generator = torch.Generator().manual_seed(seed)  # on the CPU: same stream on every device
        rows = [p for p in prompts for _ in range(params.n)]
        samples: list[Sample] = []
        training = self.model.training  # a learner's module in train mode: no dropout and no checkpointing here
        self.model.eval()
        try:
            with torch_threads(self.threads):  # this policy's thread count, for its own forward passes only
                for start in range(0, len(rows), self.max_batch_size):
                    samples += self._generate_batch(rows[start:start + self.max_batch_size], params, generator)
        finally:
            self.model.train(training)
        grouped = [samples[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]
        return grouped, 0

    @torch.no_grad()
    def _generate_batch(self, rows: list[list[int]], params: SamplingParams, generator) -> list[Sample]:
        B = len(rows)
        # Prefill each distinct prompt once (a prompt with n samples, or the same prefix twice in a
        # call), then give every row its prompt's cache: the forward pass over a prompt is not repeated.
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = [distinct.setdefault(tuple(r), len(distinct)) for r in rows]  # row -> distinct prompt
        prompts = [list(p) for p in distinct]
        P, L = len(prompts), max(len(r) for r in prompts)
        input_ids = torch.full((P, L), self._pad, dtype=torch.long)
        attention = torch.zeros((P, L), dtype=torch.long)
        for i, r in enumerate(prompts):  # left padding: every row's next token sits at column L
            input_ids[i, L - len(r):] = torch.tensor(r)
            attention[i, L - len(r):] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=PAD_POSITION)  # (P, L)

        from transformers import DynamicCache
        cache = DynamicCache()
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)  # LM head on the last column only
        logits = out.logits[:, -1, :].float()  # (P, V)
        next_position = positions[:, -1] + 1  # (P,)
        if P < B:
            index = torch.tensor(row_prompt, device=self.device)
            cache.batch_select_indices(index)
            logits, attention, next_position = logits[index], attention[index], next_position[index]  # (B, ...)

        token_ids: list[list[int]] = [[] for _ in range(B)]
        logprobs: list[list[float]] = [[] for _ in range(B)]
        finish: list[str | None] = [None] * B
        stops = _StopChecker(self.tokenizer, params.stop, B) if params.stop else None
        active = list(range(B))  # row index (into the original batch) of each live batch row
        for _ in range(params.max_tokens):
            chosen, chosen_logp = _sample(logits, params, generator)  # (b,), (b,)
            chosen_ids, chosen_logps = chosen.tolist(), chosen_logp.tolist()  # one transfer per step, not per row
            keep = []
            for j, row in enumerate(active):
                tok = chosen_ids[j]
                token_ids[row].append(tok)
                logprobs[row].append(chosen_logps[j])
                if tok in self._eos and not params.ignore_eos:
                    finish[row] = "stop"
                elif stops is not None and stops.hit(row, tok, token_ids[row]):
                    finish[row] = "step"
                elif len(token_ids[row]) >= params.max_tokens:
                    finish[row] = "length"
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):  # drop finished rows from the batch and the cache
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                attention, next_position, chosen = attention[index], next_position[index], chosen[index]
                active = [active[j] for j in keep]
            attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=1)
            out = self.model(input_ids=chosen[:, None], attention_mask=attention,
                             position_ids=next_position[:, None], past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :].float()
            next_position = next_position + 1
        return [Sample(token_ids=token_ids[i], logprobs=logprobs[i], text=self.decode(token_ids[i]),
                       finish_reason=finish[i] or "length") for i in range(B)]


def _sample(logits: torch.Tensor, params: SamplingParams, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return it and its raw (temperature 1) log-probability."""
    raw_logp = F.log_softmax(logits, dim=-1)  # (b, V)
    if params.greedy:
        chosen = logits.argmax(dim=-1)
    else:
        probs = F.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p  # keep the smallest head >= top_p
            sorted_probs = sorted_probs.masked_fill(outside, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        chosen = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)
    return chosen, raw_logp.gather(-1, chosen[:, None]).squeeze(-1)


def _hits_stop(tokenizer, token_ids: list[int], stops: tuple[str, ...]) -> bool:
    """True when the text decoded so far contains a stop string (it can only have just appeared)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    return any(s in text for s in stops)


class _StopChecker:
    """Stop strings checked incrementally: each row's new text comes from a `tokenizers` DecodeStream
    (the incremental detokenizer vLLM uses too), so a check costs O(1) per token instead of decoding
    the whole sample again (O(T^2) per sample). Only the last `len(longest stop) - 1` characters are
    kept, which is all a new match can reach back into. Slow tokenizers fall back to `_hits_stop`."""

    def __init__(self, tokenizer, stops: tuple[str, ...], rows: int) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.keep = max(len(s) for s in stops) - 1
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        if self.backend is not None:
            from tokenizers.decoders import DecodeStream
            self.streams = [DecodeStream(skip_special_tokens=True) for _ in range(rows)]
            self.tails = [""] * rows

    def hit(self, row: int, token: int, token_ids: list[int]) -> bool:
        if self.backend is None:
            return _hits_stop(self.tokenizer, token_ids, self.stops)
        chunk = self.streams[row].step(self.backend, token)
        if not chunk:  # nothing new to read yet (a partial character, or a skipped special token)
            return False
        text = self.tails[row] + chunk
        self.tails[row] = text[-self.keep:] if self.keep else ""
        return any(s in text for s in self.stops)
