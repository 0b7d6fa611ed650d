"""Format reward for R1-style completions: ``<think> ... </think>`` followed by the answer.

DeepSeek-R1 (and TinyZero) reward the shape of a completion separately from its correctness, so
the policy learns to close its reasoning and then answer. Tags are configurable; an optional
answer tag pair (``<answer>``/``</answer>``) can be required after the thinking block. Any
malformed or non-string completion gets 0.0; this function never raises on model output.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FormatSpec", "R1_FORMAT", "format_reward"]


@dataclass(frozen=True)
class FormatSpec:
    """The expected layout of a completion."""

    think_open: str = "<think>"
    """Tag that opens the reasoning."""
    think_close: str = "</think>"
    """Tag that closes the reasoning."""
    answer_open: str | None = None
    """If set (with ``answer_close``), the answer after the reasoning must be wrapped in these tags
    and nothing but whitespace may follow the closing tag."""
    answer_close: str | None = None
    """Closing answer tag; must be set exactly when ``answer_open`` is."""
    open_in_prompt: bool = False
    """True when the prompt already ends with ``think_open`` (R1-Zero template), so the completion
    starts inside the reasoning and must not contain the opening tag itself."""

    def __post_init__(self) -> None:
        if not self.think_open or not self.think_close:
            raise ValueError(f"FormatSpec: think tags must be non-empty, got {self.think_open!r}, {self.think_close!r}")
        if (self.answer_open is None) != (self.answer_close is None):
            raise ValueError(
                "FormatSpec: set both answer_open and answer_close or neither, "
                f"got {self.answer_open!r} and {self.answer_close!r}"
            )


R1_FORMAT = FormatSpec()
"""``<think> reasoning </think> answer``, as DeepSeek-R1 uses."""


def format_reward(completion: str, spec: FormatSpec = R1_FORMAT) -> float:
    """1.0 if ``completion`` follows ``spec`` exactly once, else 0.0.

    Required: (unless ``spec.open_in_prompt``) the completion starts, after whitespace, with the
    opening think tag; exactly one opening and one closing think tag; non-empty reasoning; then a
    non-empty answer (wrapped in the answer tags, once, with nothing after them, when configured).
    """
    if not isinstance(completion, str):
        return 0.0
    text = completion.strip()
    if spec.open_in_prompt:
        if spec.think_open in text:
            return 0.0
        body = text
    else:
        if not text.startswith(spec.think_open) or text.count(spec.think_open) != 1:
            return 0.0
        body = text[len(spec.think_open) :]
    if body.count(spec.think_close) != 1:
        return 0.0
    reasoning, answer = body.split(spec.think_close)
    reasoning, answer = reasoning.strip(), answer.strip()
    if not reasoning or not answer:
        return 0.0
    if spec.answer_open is not None:
        if answer.count(spec.answer_open) != 1 or answer.count(spec.answer_close) != 1:
            return 0.0
        if not answer.startswith(spec.answer_open) or not answer.endswith(spec.answer_close):
            return 0.0
        if not answer[len(spec.answer_open) : -len(spec.answer_close)].strip():
            return 0.0
    return 1.0
