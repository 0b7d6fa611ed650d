"""R1 format reward: well-formed completions get 1, anything malformed gets 0 and never raises."""

from __future__ import annotations

import pytest

from verifiers.format import R1_FORMAT, FormatSpec, format_reward

ANSWER_TAGS = FormatSpec(answer_open="<answer>", answer_close="</answer>")


@pytest.mark.parametrize(
    "completion, spec",
    [
        ("<think>2+2 is 4</think> The answer is 4.", R1_FORMAT),
        ("\n <think>\nsteps\n</think>\n\n\\boxed{4}\n", R1_FORMAT),
        ("<think>steps</think><answer>4</answer>", ANSWER_TAGS),
        ("steps</think> 4", FormatSpec(open_in_prompt=True)),
        ("<reason>r</reason> a", FormatSpec(think_open="<reason>", think_close="</reason>")),
    ],
)
def test_well_formed(completion, spec):
    assert format_reward(completion, spec) == 1.0


@pytest.mark.parametrize(
    "completion, spec",
    [
        ("The answer is 4.", R1_FORMAT),
        ("<think>never closed, 4", R1_FORMAT),
        ("<think>steps</think>", R1_FORMAT),  # no answer
        ("<think> </think> 4", R1_FORMAT),  # no reasoning
        ("intro <think>steps</think> 4", R1_FORMAT),  # text before the tag
        ("<think>a</think> b <think>c</think> d", R1_FORMAT),
        ("<think>a</think></think> 4", R1_FORMAT),
        ("</think> 4 <think>", R1_FORMAT),
        ("<think>steps</think> 4", ANSWER_TAGS),
        ("<think>steps</think><answer>4</answer> trailing", ANSWER_TAGS),
        ("<think>steps</think><answer> </answer>", ANSWER_TAGS),
        ("<think>steps</think> 4", FormatSpec(open_in_prompt=True)),
        (None, R1_FORMAT),
        (b"<think>x</think> y", R1_FORMAT),
        ("<think>" * 100_000, R1_FORMAT),
    ],
)
def test_malformed_gets_zero(completion, spec):
    assert format_reward(completion, spec) == 0.0


def test_spec_validation():
    with pytest.raises(ValueError, match="answer_open and answer_close"):
        FormatSpec(answer_open="<answer>")
    with pytest.raises(ValueError, match="think tags must be non-empty"):
        FormatSpec(think_open="")
