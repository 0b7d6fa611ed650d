"""The search tree: structure, trajectories for the learner, persistence and views."""

from __future__ import annotations

import pytest

from planner.strategies.common import backup
from planner.tree import NO_PARENT, ROOT, SearchTree


def small_tree() -> SearchTree:
    tree = SearchTree.new([1, 2, 3], "Q:", strategy="test")
    a = tree.add_child(ROOT, [10, 11], [-0.5, -0.25], "ab", "step")
    b = tree.add_child(ROOT, [12], [-1.0], "c", "step")
    leaf = tree.add_child(a, [13, 14, 2], [-0.1, -0.2, -0.3], "de", "stop", terminal=True)
    tree[a].score, tree[leaf].score, tree[leaf].reward = 0.7, 0.9, 1.0
    backup(tree, a, 0.7)
    backup(tree, leaf, 0.9)
    backup(tree, b, 0.2)
    return tree


def test_structure_and_prefixes():
    tree = small_tree()
    assert tree[ROOT].parent == NO_PARENT and tree.prompt_ids == [1, 2, 3]
    assert tree[ROOT].children == [1, 2] and tree[3].depth == 2
    assert tree.path(3) == [ROOT, 1, 3]
    assert tree.leaves() == [2, 3] and tree.terminal_nodes() == [3]
    assert tree.prefix_ids(3) == [1, 2, 3, 10, 11, 13, 14, 2]
    assert tree.response_text(3) == "abde"
    # backed-up statistics: a saw 0.7 and 0.9; the root saw all three values
    assert (tree[1].visits, tree[1].value) == (2, pytest.approx(0.8))
    assert (tree[ROOT].visits, tree[ROOT].value) == (3, pytest.approx(0.6))
    assert tree[ROOT].score is None and SearchTree.new([5])[ROOT].value is None


def test_trajectory_has_ids_logprobs_spans_and_values():
    t = small_tree().trajectory(3)
    assert t.prompt_ids == [1, 2, 3]
    assert t.response_ids == [10, 11, 13, 14, 2]
    assert t.logprobs == [-0.5, -0.25, -0.1, -0.2, -0.3]
    assert t.nodes == [1, 3] and t.step_spans == [(0, 2), (2, 5)]
    assert t.values == [pytest.approx(0.8), pytest.approx(0.9)] and t.scores == [0.7, 0.9]
    assert (t.reward, t.terminal, t.finish_reason, t.text) == (1.0, True, "stop", "abde")
    assert t.sampled_mask == [True] * 5
    unfinished = small_tree().trajectory(2)
    assert unfinished.reward is None and not unfinished.terminal


def test_mismatched_logprobs_are_refused():
    with pytest.raises(ValueError, match="differ in length: 2 vs 1"):
        SearchTree.new([1]).add_child(ROOT, [4, 5], [-1.0], "x")


def test_json_round_trip(tmp_path):
    tree = small_tree()
    path = tree.save(tmp_path / "tree.json")
    loaded = SearchTree.load(path)
    assert loaded.to_dict() == tree.to_dict()
    assert loaded.trajectory(3) == tree.trajectory(3)
    assert loaded.meta == {"strategy": "test"}


def test_networkx_view():
    graph = small_tree().to_networkx()
    assert sorted(graph.edges) == [(0, 1), (0, 2), (1, 3)]
    assert graph.nodes[3]["token_ids"] == [13, 14, 2] and graph.nodes[1]["value"] == pytest.approx(0.8)
    assert graph.nodes[3]["terminal"] and graph.graph["strategy"] == "test"


def test_dot_and_html_views_show_steps_values_and_visits():
    tree = small_tree()
    tree[2].text = 'say "hi" <b>'
    dot = tree.to_dot()
    assert dot.startswith("digraph") and "n1 -> n3;" in dot and "N=2 Q=0.800 score=0.700" in dot
    assert 'say \\"hi\\"' in dot
    page = tree.to_html()
    assert page.startswith("<!DOCTYPE html>") and "say &quot;hi&quot; &lt;b&gt;" in page
    assert "#3 N=1 Q=0.900 score=0.900 P=1.000 reward=1 terminal" in page
