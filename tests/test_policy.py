"""The policy interface on the transformers backend, and its input validation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from planner.policy import SamplingParams, load_policy
from planner.policy.types import ComputeStats


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_policy(tiny_model_dir, backend="hf", seed=0)


def prompts_for(policy, count=4):
    return [policy.encode_prompt(f"what is {i} + {2 * i}?") for i in range(count)]


def test_generate_shapes_order_and_counters(policy):
    prompts = prompts_for(policy, 3)
    before = policy.stats.copy()
    out = policy.generate(prompts, SamplingParams(n=5, temperature=1.0, max_tokens=12, seed=1))
    assert len(out) == 3 and all(len(group) == 5 for group in out)
    for group in out:
        for s in group:
            assert 1 <= len(s.token_ids) <= 12 and len(s.logprobs) == len(s.token_ids)
            assert all(lp <= 0 for lp in s.logprobs)
            assert s.text == policy.decode(s.token_ids)
            assert s.finish_reason in ("stop", "length")
    spent = policy.stats - before
    assert spent.calls == 1 and spent.prompt_tokens == sum(map(len, prompts))
    assert spent.generated_tokens == sum(len(s.token_ids) for g in out for s in g)


def test_input_order_is_kept(policy):
    prompts = prompts_for(policy, 4)
    greedy = SamplingParams(temperature=0, max_tokens=8)
    together = policy.generate(prompts, greedy)
    alone = [policy.generate([p], greedy)[0] for p in prompts]
    assert [g[0].token_ids for g in together] == [a[0].token_ids for a in alone]


def test_same_seed_same_samples_other_seed_differs(policy):
    prompts = prompts_for(policy, 2)
    a = policy.generate(prompts, SamplingParams(n=4, max_tokens=10, seed=7))
    b = policy.generate(prompts, SamplingParams(n=4, max_tokens=10, seed=7))
    c = policy.generate(prompts, SamplingParams(n=4, max_tokens=10, seed=8))
    ids = lambda out: [s.token_ids for g in out for s in g]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)


def test_logprobs_are_the_models_raw_logprobs(policy):
    prompt = prompts_for(policy, 1)[0]
    sample = policy.generate([prompt], SamplingParams(temperature=0.7, top_p=0.9, max_tokens=10, seed=3))[0][0]
    full = torch.tensor([prompt + sample.token_ids])
    with torch.no_grad():
        logits = policy.model(full).logits[0].float()
    logp = torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(-1, torch.tensor(sample.token_ids)[:, None])
    # two code paths (the sampler's KV-cached decode and one full forward), float32, no optimizer in between:
    # they differ by float summation order only, ~1e-6 per log-probability here, so 1e-4 holds on any CPU
    assert torch.allclose(logp.squeeze(-1), torch.tensor(sample.logprobs), atol=1e-4)


def test_stop_string_ends_the_step_on_the_completing_token(policy):
    prompts = prompts_for(policy, 4)
    free = policy.generate(prompts, SamplingParams(n=8, max_tokens=40, seed=5))
    stopped = policy.generate(prompts, SamplingParams(n=8, max_tokens=40, seed=5, stop=("e",)))
    hits = 0
    for free_group, stop_group in zip(free, stopped):
        for f, s in zip(free_group, stop_group):
            if s.finish_reason == "step":
                hits += 1
                assert s.text.endswith("e") and s.text.count("e") == 1
                assert f.token_ids[:len(s.token_ids)] == s.token_ids  # same stream, cut at the stop
            else:
                assert "e" not in s.text
    assert hits > 0


def test_load_weights_changes_the_model(policy, tiny_model_dir):
    other = load_policy(tiny_model_dir, backend="hf")
    prompt = prompts_for(other, 1)
    before = other.generate(prompt, SamplingParams(temperature=0, max_tokens=16))[0][0]
    new = {k: v + 0.3 * torch.randn_like(v) for k, v in other.model.state_dict().items()}
    other.load_weights(new)
    assert torch.equal(other.model.state_dict()["lm_head.weight"], new["lm_head.weight"])
    after = other.generate(prompt, SamplingParams(temperature=0, max_tokens=16))[0][0]
    assert after.logprobs != before.logprobs
    with pytest.raises(KeyError, match="no parameter"):
        other.load_weights({"not.a.weight": torch.zeros(1)})


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, r"n must be an integer >= 1; got 0"),
    ({"temperature": -0.5}, r"temperature must be a number >= 0 .*got -0.5"),
    ({"top_p": 0}, r"top_p must be a number in \(0, 1\]; got 0"),
    ({"max_tokens": 0}, r"max_tokens must be an integer >= 1; got 0"),
    ({"stop": ("",)}, r"stop must be a tuple of non-empty strings"),
])
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_bad_inputs_raise_one_clear_error(policy, tmp_path):
    with pytest.raises(FileNotFoundError, match="no model folder"):
        load_policy(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown backend 'tensorrt'"):
        load_policy(tmp_path, backend="tensorrt")
    with pytest.raises(ValueError, match="prompt_token_ids is empty"):
        policy.generate([], SamplingParams())
    with pytest.raises(ValueError, match="prompt 0 must be a non-empty list"):
        policy.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        policy.generate([[10**6]], SamplingParams())
    with pytest.raises(TypeError, match="list of token-id lists"):
        policy.generate("hello", SamplingParams())


def test_prompt_with_system_message_and_assistant_prefill(policy):
    """The char tokenizer's template (`<|role|>content\n` per message, then `<|assistant|>`), written out
    by hand: the system message first, the prefill's characters after the generation prompt."""
    tok = policy.tokenizer
    expected = (tok.convert_tokens_to_ids(["<|system|>"]) + policy.encode("Be brief.\n")
                + tok.convert_tokens_to_ids(["<|user|>"]) + policy.encode("2+2?\n")
                + tok.convert_tokens_to_ids(["<|assistant|>"]) + policy.encode("Answer:"))
    assert policy.encode_prompt("2+2?", system="Be brief.", prefill="Answer:") == expected
    assert policy.encode_prompt("2+2?") == expected[len(policy.encode("Be brief.\n")) + 1:-len("Answer:")]
    assert policy.encode_prompt("2+2?", chat=False, prefill=" 4") == policy.encode("2+2? 4")


def test_compute_stats_arithmetic():
    a = ComputeStats(prompt_tokens=10, cached_prompt_tokens=4, generated_tokens=7, calls=1, seconds=0.5)
    b = ComputeStats(prompt_tokens=3, cached_prompt_tokens=0, generated_tokens=2, calls=1, seconds=0.25)
    assert (a + b).to_dict() == {"prompt_tokens": 13, "cached_prompt_tokens": 4, "generated_tokens": 9,
                                 "calls": 2, "seconds": 0.75}
    assert (a - b).generated_tokens == 5 and a.cache_hit_fraction == 0.4


def test_threads_apply_inside_the_backends_own_calls_only(tiny_model_dir):
    """HFPolicy(threads=k) runs its forward passes with k torch threads and leaves the process's
    setting (and its environment) as it found them: at construction, after generating, after a push."""
    import os

    environ, threads = dict(os.environ), torch.get_num_threads()
    own = threads + 1
    other = load_policy(tiny_model_dir, backend="hf", threads=own)
    assert torch.get_num_threads() == threads
    seen = []
    forward = other.model.forward
    other.model.forward = lambda *args, **kwargs: (seen.append(torch.get_num_threads()), forward(*args, **kwargs))[1]
    other.generate(prompts_for(other, 2), SamplingParams(n=2, max_tokens=6, seed=0))
    assert seen and set(seen) == {own}
    assert torch.get_num_threads() == threads
    other.load_weights(other.model.state_dict())
    assert torch.get_num_threads() == threads and dict(os.environ) == environ
    with pytest.raises(ValueError, match="threads must be an integer >= 1 or None; got 0"):
        load_policy(tiny_model_dir, backend="hf", threads=0)


def test_scoped_settings_are_restored(monkeypatch):
    import os

    from planner.policy.scoped import environment, torch_threads

    monkeypatch.setenv("TREERL_KEPT", "before")
    monkeypatch.delenv("TREERL_NEW", raising=False)
    with environment({"TREERL_KEPT": "inside", "TREERL_NEW": "inside"}):
        assert os.environ["TREERL_KEPT"] == os.environ["TREERL_NEW"] == "inside"
        os.environ["TREERL_OTHER"] = "set by the block"
    assert os.environ["TREERL_KEPT"] == "before" and "TREERL_NEW" not in os.environ
    assert os.environ.pop("TREERL_OTHER") == "set by the block"  # only the named ones are restored
    environ = dict(os.environ)
    with environment({"TREERL_NEW": "inside"}, restore_all=True):
        os.environ["TREERL_OTHER"] = "set by the block"
        os.environ["TREERL_KEPT"] = "changed by the block"
    assert dict(os.environ) == environ  # restore_all: everything the block set is undone
    threads = torch.get_num_threads()
    with torch_threads(threads + 1):
        assert torch.get_num_threads() == threads + 1
    assert torch.get_num_threads() == threads


def test_load_policy_resolves_model_names_like_the_scripts(tiny_model_dir, tmp_path, monkeypatch):
    """`load_policy("smollm2")` goes through the scripts' resolver: with a converted SmolLM2 folder in
    the cache ($TREERL_CACHE; here a tiny model stands in for the converted weights) both find the same
    folder, and a name that is neither a folder nor a known model fails the same way in both."""
    from planner.policy import NAMED_MODELS
    from planner.policy.local_models import resolve_model
    from planner.scaling import resolve_model as scaling_resolve

    monkeypatch.setenv("TREERL_CACHE", str(tmp_path))
    shutil.copytree(tiny_model_dir, tmp_path / "SmolLM2-135M-Instruct")
    assert resolve_model("smollm2") == scaling_resolve("smollm2") == tmp_path / "SmolLM2-135M-Instruct"
    policy = load_policy("smollm2")
    try:
        assert Path(policy.model_path) == tmp_path / "SmolLM2-135M-Instruct"
    finally:
        policy.close()
    assert set(NAMED_MODELS) == {"smollm2", "qwen2.5-coder-0.5b"}
    for resolve in (resolve_model, load_policy):
        with pytest.raises(FileNotFoundError, match=r"no model folder at 'smollm3'.*one of \['qwen2.5-coder-0.5b', "
                                                    r"'smollm2'\]"):
            resolve("smollm3")
