"""The learner's forward pass: per-token log-probabilities (and entropies) of a causal LM.

Two paths give the same numbers:

- dense: `model(...).logits` for the whole batch, (B, L, V) floats, then log-softmax in chunks;
- chunked (`chunk_size`): the trunk's hidden states (B, L, H), then the LM head, log-softmax and
  gather over `chunk_size` positions at a time, each chunk under activation checkpointing, so at
  most one chunk's (chunk_size, V) logits exist, in the forward and in the backward (the head is
  recomputed per chunk). The vocabulary projection dominates memory for long rows of large-vocabulary
  models (a 4k-token row of a 150k-vocabulary model is 2.4 GB of float32 logits); this is the
  chunked form of the "fused linear cross-entropy" trick (Liger-Kernel; verl's and OpenRLHF's
  logit chunking).

Models whose head is not a plain linear map of the last hidden state (final logit soft-capping,
as in Gemma 2) take the dense path.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from rl.losses import entropy_from_logits, sequence_logprobs

__all__ = ["token_logprobs", "packed_token_logprobs", "rows_from_packed", "supports_chunking", "PolicyForward",
           "ValueForward"]


def supports_chunking(model) -> bool:
    """Whether `model` exposes a decoder trunk and a linear LM head with nothing in between."""
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return False
    return hasattr(model, "get_decoder") and isinstance(getattr(model, "lm_head", None), torch.nn.Linear)


def _head_chunk(head: torch.nn.Linear, hidden: Tensor, targets: Tensor, with_entropy: bool,
                temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    logits = head(hidden).float() / temperature  # (C, V)
    logp = sequence_logprobs(logits[None], targets[None])[0]  # (C,)
    entropy = entropy_from_logits(logits[None])[0] if with_entropy else torch.zeros_like(logp)  # (C,)
    return logp, entropy


def token_logprobs(model, input_ids: Tensor, attention_mask: Tensor, *, entropy: str = "none",
                   chunk_size: int | None = None, temperature: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """(B, L) log-probability of token t given the tokens before it (0 at t = 0, so position t lines
    up with token t), and the entropy of the distribution that predicted token t (B, L) when `entropy`
    is "grad" (an entropy bonus needs its gradient) or "log" (a diagnostic, no gradient).

    chunk_size: positions per chunk of the chunked path (None, or a model that cannot be chunked:
    the dense path). temperature: the distribution is softmax(logits / temperature), the one an engine
    samples from at that temperature (1: the policy itself).
    """
    if entropy not in ("none", "grad", "log"):
        raise ValueError(f"entropy must be one of ['grad', 'log', 'none']; got {entropy!r}")
    if chunk_size is not None and supports_chunking(model):
        return _chunked(model, input_ids, attention_mask, entropy, chunk_size, temperature)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, L, V)
    if temperature != 1.0:
        logits = logits.float() / temperature
    logp = torch.nn.functional.pad(sequence_logprobs(logits[:, :-1], input_ids[:, 1:]), (1, 0))  # (B, L)
    if entropy == "none":
        return logp, None
    with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
        source = logits if entropy == "grad" else logits.detach()
        values = torch.nn.functional.pad(entropy_from_logits(source[:, :-1]), (1, 0))  # (B, L)
    return logp, values


def _chunked(model, input_ids: Tensor, attention_mask: Tensor, entropy: str, chunk_size: int, temperature: float):
    B, L = input_ids.shape
    if L < 2:
        raise ValueError(f"token_logprobs needs rows of at least 2 tokens (a prompt and a response); got L={L}")
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, H)
    flat_hidden = hidden[:, :-1].reshape(B * (L - 1), -1)  # (N, H): position t predicts token t + 1
    logp, ent = _head(model.lm_head, flat_hidden, input_ids[:, 1:].reshape(-1), entropy, chunk_size,
                      temperature)  # (N,)
    pad = lambda x: torch.nn.functional.pad(x.view(B, L - 1), (1, 0))  # noqa: E731 (B, L)
    return pad(logp), (pad(ent) if ent is not None else None)


def packed_token_logprobs(model, packed: dict[str, Tensor], *, entropy: str = "none",
                          chunk_size: int | None = None, temperature: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """(G, N) log-probability of each packed token given the tokens on its path, and the entropy of the
    distribution that predicted it, for trees packed by `rl.packing.collate` (the first prompt
    token's entries are meaningless: it has no predecessor). The hidden state of a token's
    predecessor on its path predicts it, so a parent's last token predicts each child's first."""
    from rl.packing import mask_for

    dtype = next(model.parameters()).dtype
    hidden = model.get_decoder()(input_ids=packed["input_ids"], position_ids=packed["position_ids"],
                                 attention_mask=mask_for(model, packed["attention"], dtype)).last_hidden_state  # (G, N, H)
    G, N, H = hidden.shape
    predictors = hidden.gather(1, packed["predecessor"][..., None].expand(G, N, H))  # (G, N, H)
    logp, ent = _head(model.lm_head, predictors.reshape(G * N, H), packed["input_ids"].reshape(-1), entropy,
                      chunk_size, temperature)
    return logp.view(G, N), (ent.view(G, N) if ent is not None else None)


def rows_from_packed(packed_values: Tensor, rows_group: Tensor, packed_index: Tensor, zero_first: bool) -> Tensor:
    """(B, L) row-layout values gathered from (G, N) packed ones: row b's token t is packed token
    `packed_index[b, t]` of packed tree `rows_group[b]`; 0 on padding (and at t = 0 when `zero_first`,
    where a log-probability has no predicting context)."""
    index = packed_index.clamp(min=0)  # (B, L)
    out = packed_values[rows_group[:, None], index]  # (B, L)
    keep = packed_index >= 0
    if zero_first:
        keep = keep & (torch.arange(packed_index.shape[1], device=packed_index.device) > 0)
    return torch.where(keep, out, torch.zeros_like(out))


def _head(head: torch.nn.Linear, hidden: Tensor, targets: Tensor, entropy: str, chunk_size: int | None,
          temperature: float = 1.0):
    """Log-probability of `targets` (M,) under head(hidden) (M, H) and its entropy: in one piece
    (chunk_size None), or `chunk_size` rows of logits at a time, each checkpointed when gradients are
    on so that one chunk's logits exist in the backward too."""
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be an integer >= 1 or None; got {chunk_size!r}")
    with_entropy = entropy != "none"
    step = chunk_size or max(1, targets.shape[0])
    logps, entropies = [], []
    for start in range(0, targets.shape[0], step):
        h, y = hidden[start:start + step], targets[start:start + step]
        if chunk_size is not None and torch.is_grad_enabled():  # recompute this chunk's logits in the backward
            logp, ent = checkpoint(_head_chunk, head, h, y, with_entropy, temperature, use_reentrant=False)
        else:
            logp, ent = _head_chunk(head, h, y, with_entropy, temperature)
        logps.append(logp)
        entropies.append(ent if entropy == "grad" else ent.detach())
    return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)


class PolicyForward(torch.nn.Module):
    """A causal LM's per-token log-probabilities (and entropies) as one module, for rows
    (`input_ids`, `attention_mask`) or packed trees (`rl.packing.collate`'s tensors): the module the
    data-parallel wrappers (DDP, FSDP2) wrap, since they synchronise through a module's forward."""

    def __init__(self, model, chunk_size: int | None = None) -> None:
        super().__init__()
        self.model, self.chunk_size = model, chunk_size

    def forward(self, inputs: dict[str, Tensor], entropy: str = "none",
                temperature: float = 1.0) -> tuple[Tensor, Tensor | None]:
        if "predecessor" in inputs:
            return packed_token_logprobs(self.model, inputs, entropy=entropy, chunk_size=self.chunk_size,
                                         temperature=temperature)
        return token_logprobs(self.model, inputs["input_ids"], inputs["attention_mask"], entropy=entropy,
                              chunk_size=self.chunk_size, temperature=temperature)


class ValueForward(torch.nn.Module):
    """A `ValueCritic`'s per-token values as one module (rows or packed trees), for the same reason."""

    def __init__(self, critic) -> None:
        super().__init__()
        self.critic = critic
        self.model = critic.model  # registered, so the wrappers see the parameters

    def forward(self, inputs: dict[str, Tensor]) -> Tensor:
        if "predecessor" in inputs:
            return self.critic.packed_values(inputs)
        return self.critic.token_values(inputs["input_ids"], inputs["attention_mask"])
