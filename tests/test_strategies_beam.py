"""Step-level beam search against a hand-worked example (num_beams N=4, beam_width M=2: keep 2).

    "Q" -> a .2 | b .9 | c .1 | d .5          round 1: 4 samples from the root; keep b, d
    "Qb\\n\\n" -> e (EOS) .4 | f .8           round 2: 2 samples per kept beam; e and g finish
    "Qd\\n\\n" -> g (EOS) .95 | h .3          keep f, h (only two unfinished)
    "Qb\\n\\nf\\n\\n" -> i .6 | j .1 (EOS)     round 3: 2 samples each; i, j, k, l finish -> 6 >= N, stop
    "Qd\\n\\nh\\n\\n" -> k .2 | l .7 (EOS)

Final pick "best" by aggregated path score:
  last:    e .4, g .95, i .6, j .1, k .2, l .7                            -> g
  min:     e .4, g min(.5,.95)=.5, i min(.9,.8,.6)=.6, j .1, k .2, l .3    -> i
  product: g .5*.95=.475, i .9*.8*.6=.432                                 -> g
  mean:    g (.5+.95)/2=.725, i (.9+.8+.6)/3=.7667                        -> i
"""

from __future__ import annotations

import pytest

from planner.strategies import STRATEGIES, BeamConfig
from planner.strategies.beam import beam_search
from planner.tree import ROOT

TABLE = {
    "Q": [("a\n\n", -1.0, "step"), ("b\n\n", -1.0, "step"), ("c\n\n", -1.0, "step"), ("d\n\n", -1.0, "step")],
    "Qb\n\n": [("e", -1.0, "stop"), ("f\n\n", -1.0, "step")],
    "Qd\n\n": [("g", -1.0, "stop"), ("h\n\n", -1.0, "step")],
    "Qb\n\nf\n\n": [("i", -1.0, "stop"), ("j", -1.0, "stop")],
    "Qd\n\nh\n\n": [("k", -1.0, "stop"), ("l", -1.0, "stop")],
    "Qa\n\n": [("m", -1.0, "stop")],
}
SCORES = {"a\n\n": .2, "b\n\n": .9, "c\n\n": .1, "d\n\n": .5, "b\n\ne": .4, "b\n\nf\n\n": .8, "d\n\ng": .95,
          "d\n\nh\n\n": .3, "b\n\nf\n\ni": .6, "b\n\nf\n\nj": .1, "d\n\nh\n\nk": .2, "d\n\nh\n\nl": .7,
          "a\n\nm": .5}


def last_char(text: str) -> str | None:
    return text.strip()[-1:] or None


def run(scripted_policy, table_scorer, **overrides):
    policy = scripted_policy(TABLE)
    config = BeamConfig(num_beams=4, beam_width=2, max_steps=5, extract=last_char, **overrides)
    return beam_search(policy.encode("Q"), policy, table_scorer(SCORES, policy), None, config, seed=0), policy


@pytest.mark.parametrize("aggregation, answer", [("last", "g"), ("min", "i"), ("product", "g"), ("mean", "i")])
def test_beam_matches_hand_computation(scripted_policy, table_scorer, aggregation, answer):
    result, policy = run(scripted_policy, table_scorer, aggregation=aggregation)
    assert result.answer == answer
    tree = result.tree
    # every round is one generate call over the kept beams: root (n=4), then [b, d] (n=2), then [f, h] (n=2)
    assert [policy.decode(p)[1:] for p in policy.seen_prompts] == ["", "b\n\n", "d\n\n", "b\n\nf\n\n", "d\n\nh\n\n"]
    assert result.compute.policy_calls == 3 and result.compute.scorer_calls == 3
    assert result.compute.generated_tokens == 4 * 3 + (2 + 3 + 2 + 3) + 4 * 2  # steps + EOS ids
    # each scored node is backed up once: b holds its own .9 and e .4, f .8, i .6, j .1 below it
    b = tree[ROOT].children[1]
    assert tree[b].visits == 5 and tree[b].value_sum == pytest.approx(2.8)
    assert tree[ROOT].visits == 12


def test_registry_and_config_validation():
    assert STRATEGIES["beam"] is beam_search
    with pytest.raises(ValueError, match="num_beams must be a multiple of beam_width=3; got 4"):
        BeamConfig(num_beams=4, beam_width=3)
    with pytest.raises(ValueError, match=r"aggregation must be one of \['last', 'mean', 'min', 'product'\]; got 'max'"):
        BeamConfig(aggregation="max")


def test_pruning_drops_low_beams_and_resets_to_best_visited(scripted_policy, table_scorer):
    result, policy = run(scripted_policy, table_scorer, prune_below=0.85, max_resets=1)
    tree = result.tree
    text = {i: tree.response_text(i) for i in range(len(tree))}
    # round 1 keeps b .9 and d .5; d < .85 is pruned, b goes on alone with all N=4 samples:
    # e .4 (EOS), f .8, e, f. Both f beams are < .85 and pruned: no beam is left, so the search
    # restarts from the best visited unpruned, unfinished node: b, whose visit-mean value
    # (.9 + .4 + .8 + .4 + .8) / 5 = .66 beats a .2 and c .1. b samples e, f, e, f again: now 4 >= N
    # responses have finished (all "e"), and the new f beams are pruned too.
    b = tree[ROOT].children[1]
    assert tree[b].visits == 9 and tree[b].value_sum == pytest.approx(.9 + 4 * .4 + 4 * .8)
    assert sorted(text[i] for i in range(len(tree)) if tree[i].pruned) == ["b\n\nf\n\n"] * 4 + ["d\n\n"]
    assert tree.meta["resets"] == [b]
    assert result.answer == "e" and result.compute.policy_calls == 3


def test_dvts_greedy_subtrees_match_hand_computation(scripted_policy, table_scorer, check_golden):
    from planner.strategies.dvts import DVTSConfig, dvts

    policy = scripted_policy(TABLE)
    config = DVTSConfig(num_beams=4, beam_width=2, max_steps=5, extract=last_char, final="weighted")
    result = dvts(policy.encode("Q"), policy, table_scorer(SCORES, policy), None, config, seed=0)
    tree = result.tree
    # round 1: one call with all 4 samples from the root, 2 per subtree: [a .2, b .9] -> b; [c .1, d .5] -> d
    # round 2: b -> e (EOS) .4, f .8 -> f; d -> g (EOS) .95, h .3 -> g, which finishes subtree 2
    # round 3: only subtree 1: f -> i (EOS) .6, j (EOS) .1 -> i, which finishes it
    # weighted vote between "i" (.6) and "g" (.95) -> g
    assert [policy.decode(p)[1:] for p in policy.seen_prompts] == ["", "b\n\n", "d\n\n", "b\n\nf\n\n"]
    assert result.answer == "g" and result.text == "d\n\ng"
    assert tree[ROOT].visits == 4 + 4 + 2
    check_golden(tree, "dvts.json")
    assert STRATEGIES["dvts"] is dvts


# DVTS early termination and reset, N=4, M=2 (two subtrees), prune_below=.5, max_resets=1:
RESET_TABLE = {
    "Q": [("a\n\n", -1.0, "step"), ("b\n\n", -1.0, "step"), ("c\n\n", -1.0, "step"), ("d\n\n", -1.0, "step")],
    "Qb\n\n": [("e\n\n", -1.0, "step"), ("f\n\n", -1.0, "step")],
    "Qc\n\n": [("g", -1.0, "stop"), ("h\n\n", -1.0, "step")],
    "Qb\n\nf\n\n": [("i", -1.0, "stop"), ("j", -1.0, "stop")],
}
RESET_SCORES = {"a\n\n": .2, "b\n\n": .9, "c\n\n": .6, "d\n\n": .4, "b\n\ne\n\n": .3, "b\n\nf\n\n": .45,
                "c\n\ng": .65, "c\n\nh\n\n": .2, "b\n\nf\n\ni": .7, "b\n\nf\n\nj": .1}


def test_dvts_prunes_a_low_subtree_and_restarts_it_from_its_best_visited_node(scripted_policy, table_scorer):
    from planner.strategies.dvts import DVTSConfig, dvts

    policy = scripted_policy(RESET_TABLE)
    config = DVTSConfig(num_beams=4, beam_width=2, max_steps=5, extract=last_char, final="weighted",
                        prune_below=0.5, max_resets=1)
    result = dvts(policy.encode("Q"), policy, table_scorer(RESET_SCORES, policy), None, config, seed=0)
    tree = result.tree
    # round 1: the root samples a .2, b .9 (subtree 1 -> b) and c .6, d .4 (subtree 2 -> c); both >= .5
    # round 2: b -> e .3, f .45 -> f, below .5: f is pruned and subtree 1 restarts from the best visited,
    #   unpruned, unfinished node of its own subtree {a .2, b, e .3}: b, with visit-mean
    #   (.9 + .3 + .45) / 3 = .55 (the one reset allowed). c -> g (EOS) .65, h .2 -> g: subtree 2 is done
    # round 3: b again (the script cycles): e .3, f .45 -> the new f is below .5 and no reset is left:
    #   subtree 1 ends there, pruned
    # vote: only unpruned final nodes take part: g (.65) -> "g". Without pruning, round 3 would have
    # gone on from f (i .7 vs g .65 -> "i").
    b = tree[ROOT].children[1]
    assert tree.meta["resets"] == [b]
    assert [policy.decode(p)[1:] for p in policy.seen_prompts] == ["", "b\n\n", "c\n\n", "b\n\n"]
    assert sorted(tree.response_text(i) for i in range(len(tree)) if tree[i].pruned) == ["b\n\nf\n\n"] * 2
    assert (tree[b].visits, tree[b].value_sum) == (5, pytest.approx(.9 + 2 * (.3 + .45)))
    assert (result.answer, result.text) == ("g", "c\n\ng")
    assert tree[ROOT].visits == 4 + 4 + 2


def test_beam_golden_tree(scripted_policy, table_scorer, check_golden):
    """The golden file is what the code wrote; the expectations before it are derived by hand from the
    module docstring's example, so the file cannot silently hold a wrong tree."""
    result, _ = run(scripted_policy, table_scorer, aggregation="last")
    tree = result.tree
    # nodes in creation order: the root; round 1 a b c d (1-4); round 2 expands the kept beams in rank
    # order b, d: e f (5, 6), g h (7, 8); round 3 expands f, h: i j (9, 10), k l (11, 12) -> 13 nodes
    assert [tree.response_text(i) for i in range(len(tree))] == [
        "", "a\n\n", "b\n\n", "c\n\n", "d\n\n", "b\n\ne", "b\n\nf\n\n", "d\n\ng", "d\n\nh\n\n",
        "b\n\nf\n\ni", "b\n\nf\n\nj", "d\n\nh\n\nk", "d\n\nh\n\nl"]
    assert [tree[i].parent for i in range(len(tree))] == [-1, 0, 0, 0, 0, 2, 2, 4, 4, 6, 6, 8, 8]
    # finished: the steps that ended with EOS (e, g and all four of round 3): 6 >= N = 4 stops the search
    assert [i for i in range(len(tree)) if tree[i].terminal] == [5, 7, 9, 10, 11, 12]
    # every scored node is backed up once, into itself and its ancestors:
    #   a .2, c .1 (one visit each); b: .9 + e .4 + f .8 + i .6 + j .1 = 2.8 over 5; f: .8 + .6 + .1 = 1.5 over 3
    #   d: .5 + g .95 + h .3 + k .2 + l .7 = 2.65 over 5; h: .3 + .2 + .7 = 1.2 over 3
    #   root: all 12 scored nodes, 1.7 (round 1) + 2.45 (round 2) + 1.6 (round 3) = 5.75
    assert [(tree[i].visits, round(tree[i].value_sum, 6)) for i in range(9)] == [
        (12, 5.75), (1, 0.2), (5, 2.8), (1, 0.1), (5, 2.65), (1, 0.4), (3, 1.5), (1, 0.95), (3, 1.2)]
    assert all(tree[i].visits == 1 and tree[i].value_sum == tree[i].score for i in range(9, 13))
    # "best" by the last step's score among the finished: e .4, g .95, i .6, j .1, k .2, l .7 -> g (node 7)
    assert (result.leaf, result.answer, result.text, tree.meta["chosen"]) == (7, "g", "d\n\ng", 7)
    check_golden(tree, "beam.json")
