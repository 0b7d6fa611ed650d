"""The transformers backend ends a sample at a multi-character stop string however the text arrives."""

from planner.policy.hf import _StopChecker
from planner.policy.local_models import build_char_tokenizer


def test_a_stop_string_longer_than_the_text_so_far_is_still_found():
    """The checker keeps the last len(stop) - 1 characters. It used to keep text[len(text) - keep:],
    which for a text shorter than `keep` is a negative start: it kept too few characters, so
    "</think>" (8 characters) was never found and budget forcing's thinking ran on into the answer."""
    tokenizer = build_char_tokenizer()
    ids = tokenizer.encode("0\n</think>1", add_special_tokens=False)
    checker = _StopChecker(tokenizer, ("</think>",), rows=1)
    hits = [checker.hit(0, token, ids[:k + 1]) for k, token in enumerate(ids)]
    assert hits.index(True) == len("0\n</think>") - 1  # at the ">" that completes it, not before
    assert _StopChecker(tokenizer, ("ab",), rows=1).hit(0, tokenizer.encode("ab")[0], []) is False
