"""Which engine replica serves which prompt: one tree's prompts on one replica, the load balanced.

A search tree's prompts all extend the tree's root prompt (the problem in the chat template), and a
vLLM engine's prefix cache only helps a prompt whose prefix that same engine computed before. So an
engine pool (planner/policy/pool.py) keeps each tree on one replica, and spreads the trees:

1. **Key.** A prompt's routing key is its *chat prompt*: its tokens up to the end of the first
   occurrence of the tokenizer's generation suffix (`generation_suffix`: the ids every chat prompt
   ends with, e.g. `"\\n<|assistant|>"`, found once from the chat template). Every prompt that extends
   a chat prompt (every node of a tree grown from it) has that chat prompt's key, whatever was
   generated after it: the first occurrence of the suffix can only lie at or before the root's end.
   A prompt without the suffix (no chat template, `chat=False`) is keyed by its first
   `prefix_tokens` tokens; and with `prefix_tokens` given explicitly, every prompt is keyed that way
   (for prompts that share a long first turn, such as few-shot examples given as earlier turns).
2. **Groups.** Prompts with one key form a group, sent whole to one replica.
3. **Replica.** Groups are placed by rendezvous (highest-random-weight) hashing with bounded loads
   (Thaler & Ravishankar 1998; Mirrokni, Thorup & Zadimoghaddam 2018, "Consistent Hashing with
   Bounded Loads"): each group goes to the first replica in its own hash order whose load stays within
   `ceil((1 + slack) * prompts / replicas)`; a group that fits nowhere goes to the least loaded one.
   Groups are placed largest first, ties by key hash.

The rule reads nothing but the call's prompts, so the same call always routes the same way (a pool's
sampled results depend only on the call's seed) and a key keeps its replica across calls unless its
replica is full in that call. One search alone (one key) runs on one replica; a pool runs in
parallel when a call holds many trees (`solve_batch`, the trainer, best-of-N over many problems).
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Callable, Sequence

__all__ = ["generation_suffix", "routing_keys", "assign_replicas", "DEFAULT_PREFIX_TOKENS"]

DEFAULT_PREFIX_TOKENS = 32
"""Tokens keying a prompt that has no chat prompt in it (see the module docstring)."""


QUESTION_PAIRS = (("x", "y"), ("0", "1"), ("a", "b"), ("+", "-"))
"""One-character questions whose chat prompts are compared; the first pair the tokenizer encodes
differently counts (a small vocabulary may drop unknown characters)."""


def generation_suffix(encode_prompt: Callable[[str], list[int]]) -> tuple[int, ...]:
    """The token ids every chat prompt ends with: the longest common suffix of two chat prompts whose
    one-character questions differ. Empty when they share none (no chat template)."""
    for x, y in QUESTION_PAIRS:
        a, b = encode_prompt(x), encode_prompt(y)
        if a != b:
            break
    else:
        return ()
    length = 0
    while length < min(len(a), len(b)) and a[-1 - length] == b[-1 - length]:
        length += 1
    return tuple(a[len(a) - length:]) if length else ()


def _find(haystack: bytes, needle: bytes) -> int:
    """Index (in tokens) of the first token-aligned occurrence of `needle` in `haystack`, or -1."""
    start = haystack.find(needle)
    while start != -1 and start % 4:
        start = haystack.find(needle, start + 1)
    return start // 4 if start != -1 else -1


def routing_keys(prompts: Sequence[Sequence[int]], suffix: Sequence[int],
                 prefix_tokens: int | None = None) -> list[bytes]:
    """One key per prompt (rule 1 of the module docstring): the chat prompt it extends, or its first
    `prefix_tokens` tokens (`DEFAULT_PREFIX_TOKENS` when None and the prompt has no chat prompt)."""
    packed_suffix = array("i", suffix).tobytes() if suffix and prefix_tokens is None else b""
    keys = []
    for prompt in prompts:
        packed = array("i", prompt).tobytes()  # 4 bytes per id: searched in C, not token by token
        end = _find(packed, packed_suffix) if packed_suffix else -1
        length = end + len(suffix) if end != -1 else (prefix_tokens or DEFAULT_PREFIX_TOKENS)
        keys.append(packed[:4 * length])
    return keys


def _hash(data: bytes) -> int:
    """A stable 64-bit hash (Python's own `hash` of bytes differs between processes)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _weight(key: bytes, replica: int) -> int:
    """Rendezvous weight of `replica` for `key`: each key ranks the replicas in its own random order."""
    return _hash(key + replica.to_bytes(4, "little"))


def assign_replicas(keys: Sequence[bytes], replicas: int, slack: float) -> list[int]:
    """The replica of each prompt (rules 2 and 3 of the module docstring), for `replicas` replicas and a
    load bound of `(1 + slack)` times the mean. Deterministic: depends on nothing but its arguments."""
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be an integer >= 1; got {replicas!r}")
    if not slack >= 0:
        raise ValueError(f"slack must be a number >= 0; got {slack!r}")
    groups: dict[bytes, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    capacity = math.ceil((1 + slack) * len(keys) / replicas)
    load = [0] * replicas
    placed = [0] * len(keys)
    order = sorted(groups, key=lambda k: (-len(groups[k]), _hash(k)))
    for key in order:
        size = len(groups[key])
        preference = sorted(range(replicas), key=lambda r: -_weight(key, r))
        fitting = [r for r in preference if load[r] + size <= capacity]
        replica = fitting[0] if fitting else min(preference, key=lambda r: load[r])  # min keeps the first of ties
        load[replica] += size
        for index in groups[key]:
            placed[index] = replica
    return placed
