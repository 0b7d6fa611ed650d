"""The generative verifier (planner/likelihood.py) and its trainer (scripts/lab/verifier_lm.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from planner.likelihood import LikelihoodVerifier
from planner.prm_scorers import SCORER_FILE, load_scorer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("verifier-tiny"), init_std=0.1, seed=3)


PROMPT = [1, 40, 41, 42]
PREFIXES = [PROMPT + [50, 51, 52], PROMPT + [53], PROMPT + [50, 51, 52, 54, 55, 56, 57]]


def by_hand(model_dir, prefix: list[int], prompt_len: int) -> list[float]:
    """p(token t | tokens < t) for every response token, one unpadded forward per prefix."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([prefix])).logits[0].double(), dim=-1)  # (T, V)
    return [probs[t - 1, prefix[t]].item() for t in range(prompt_len, len(prefix))]


def test_the_value_is_the_least_likely_response_token_or_their_geometric_mean(model_dir):
    """Batched (right-padded, prefixes of three lengths) against one forward per prefix. The tolerance,
    1e-5 relative, covers float32 rounding between the two matrix shapes (pads never enter a real
    position's causal attention), which stays near 1e-7 on any CPU."""
    expected = [by_hand(model_dir, p, len(PROMPT)) for p in PREFIXES]
    least = LikelihoodVerifier(model_dir, batch_size=2).score(PREFIXES, prompt_len=len(PROMPT))
    assert least == pytest.approx([min(e) for e in expected], rel=1e-5)
    mean = LikelihoodVerifier(model_dir, reduce="mean").score(PREFIXES, prompt_len=len(PROMPT))
    assert mean == pytest.approx([math.exp(sum(map(math.log, e)) / len(e)) for e in expected], rel=1e-5)
    # a prefix's least token can only fall as the response grows: the first prefix is the third's start
    assert least[2] <= least[0]


def test_an_empty_response_gets_the_empty_value_and_the_forward_is_counted(model_dir):
    verifier = LikelihoodVerifier(model_dir, empty_value=0.75)
    assert verifier.score([PROMPT, PROMPT + [50]], prompt_len=len(PROMPT))[0] == 0.75
    assert verifier.stats.prompt_tokens == 2 * len(PROMPT) + 1 and verifier.num_parameters > 0


def test_bad_input_gets_one_clear_error(model_dir):
    verifier = LikelihoodVerifier(model_dir)
    with pytest.raises(ValueError, match="needs prompt_len"):
        verifier.score(PREFIXES)
    with pytest.raises(ValueError, match="share the policy's tokenizer"):
        verifier.score([PROMPT + [10_000]], prompt_len=len(PROMPT))
    with pytest.raises(ValueError, match="reduce must be one of"):
        LikelihoodVerifier(model_dir, reduce="max")


def test_a_folder_with_its_note_loads_as_the_verifier(model_dir, tmp_path):
    import shutil

    folder = tmp_path / "verifier"
    shutil.copytree(model_dir, folder)
    (folder / SCORER_FILE).write_text(json.dumps({"format": "likelihood", "reduce": "mean"}))
    loaded = load_scorer(folder, decode=str)
    assert isinstance(loaded, LikelihoodVerifier) and loaded.reduce == "mean"
    direct = LikelihoodVerifier(model_dir, reduce="mean").score(PREFIXES, prompt_len=len(PROMPT))
    assert loaded.score(PREFIXES, prompt_len=len(PROMPT)) == pytest.approx(direct, rel=1e-6)


def test_train_verifier_lm_writes_a_folder_that_scores(tmp_path):
    from planner.policy import load_policy
    from lab.verifier_lm import train_verifier_lm
    from verifiers.arithmetic import held_out_task

    result = train_verifier_lm(tmp_path / "verifier", max_minutes=0.05, eval_problems=4, progress=False)
    verifier = load_scorer(result.model_dir)
    assert isinstance(verifier, LikelihoodVerifier) and verifier.reduce == "min"
    policy = load_policy(result.model_dir, "hf")
    prompt = policy.encode_prompt(held_out_task(1).problems[0].question)
    response = policy.tokenizer.encode("<think>1+2=3\n", add_special_tokens=False)
    (value,) = verifier.score([prompt + response], prompt_len=len(prompt))
    assert 0.0 < value <= 1.0
    with pytest.raises(ValueError, match="reduce must be one of"):
        train_verifier_lm(tmp_path / "bad", reduce="max")


def test_the_policy_as_its_own_verifier_gives_its_sampled_confidence(model_dir):
    """Two code paths, one number: the HF backend's log-probabilities of the tokens it sampled at T=1
    and the verifier's teacher-forced ones over the same prefix. Both are float32 log-softmaxes of the
    same logits (the backend's with a KV cache, the verifier's in one pass), which agree to ~1e-6 on any
    CPU; 1e-4 relative leaves room for the different summation orders."""
    from planner.policy import SamplingParams, load_policy

    policy = load_policy(model_dir, "hf", seed=0)
    (group,) = policy.generate([PROMPT], SamplingParams(n=3, temperature=1.0, max_tokens=6, seed=1))
    prefixes = [PROMPT + list(s.token_ids) for s in group]
    values = LikelihoodVerifier(model_dir).score(prefixes, prompt_len=len(PROMPT))
    assert values == pytest.approx([math.exp(min(s.logprobs)) for s in group], rel=1e-4)
