"""The tree store: a round trip keeps ids, log-probabilities and rewards; runs do not mix; bad input."""

from __future__ import annotations

import math

import pytest

from planner.tree import SearchTree
from rl.tree_store import TreeStore
from verifiers.types import Problem


def test_round_trip_keeps_ids_logprobs_and_rewards_exactly(hand_tree, tmp_path):
    awkward = [-1 / 3, -math.pi, -1e-12, -123.456789012345678, 0.0]  # floats that a sloppy writer would round
    leaf = hand_tree.add_child(2, [22, 23, 24, 25, 26], awkward, terminal=True)
    hand_tree[leaf].reward = 0.25
    problem = Problem(id="arithmetic/3+4", question="3+4=?", reference="7", task="arithmetic")
    store = TreeStore(tmp_path / "trees.jsonl").start(0)
    store.append([hand_tree], [problem], policy_version=0)
    store.append([hand_tree, hand_tree], [problem, problem], policy_version=1)
    assert len(store) == 3

    stored = list(store)  # read lazily, line by line
    assert [s.policy_version for s in stored] == [0, 1, 1]
    assert stored[0].problem == problem
    tree = stored[0].tree
    assert tree.to_dict() == hand_tree.to_dict()
    assert [n.token_ids for n in tree.nodes] == [n.token_ids for n in hand_tree.nodes]
    assert tree[leaf].logprobs == awkward  # bit for bit
    assert [n.reward for n in tree.nodes] == [n.reward for n in hand_tree.nodes]
    assert [s.policy_version for s in store.load(min_version=1)] == [1, 1]


def test_a_fresh_run_refuses_a_used_store_and_a_resumed_run_drops_later_rows(hand_tree, tmp_path):
    problem = Problem(id="p", question="q", reference="r", task="t")
    store = TreeStore(tmp_path / "trees.jsonl").start(0)
    for version in range(3):
        store.append([hand_tree], [problem], version)
    with pytest.raises(FileExistsError, match="already holds trees; a fresh run writes a new store"):
        TreeStore(store.path).start(0)
    resumed = TreeStore(store.path).start(2)  # the checkpoint was after iteration 1: row 2 is redone
    assert [s.policy_version for s in resumed] == [0, 1]


def test_empty_or_missing_store_raises_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tree store at .*: train with --loop.tree_store PATH"):
        TreeStore(tmp_path / "none.jsonl").load()
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no trees: write trees into it first"):
        TreeStore(tmp_path / "empty.jsonl").load()
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match="other.jsonl:1 is not a tree-store row"):
        TreeStore(tmp_path / "other.jsonl").load()
    with pytest.raises(ValueError, match="one problem per tree"):
        TreeStore(tmp_path / "x.jsonl").append([SearchTree.new([1])], [], 0)
