"""Tree packing against row by row, on hand-built trees (a deep chain, a wide root, an MCTS-shaped tree;
with and without finished leaves): logits, log-probabilities, entropies, values, every loss
aggregation and its gradients agree in float32 to 1e-5, and a model that cannot take a packed tree
falls back to rows.

Why 1e-5 holds on any CPU: both layouts run the same float32 arithmetic per token; the packed
attention sees the same keys plus masked ones (weight exactly 0 after the softmax), so only the
order of the summations differs (a few hundred terms: ~1e-7 relative). The gradients are compared
before any optimizer step (see tests/test_trainer.py on Adam).
"""

from __future__ import annotations


import pytest
import torch

from planner.tree import ROOT, SearchTree
from rl.batch import batch_from_trees
from rl.config import CriticConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig, ValueConfig
from rl.critic import ValueCritic
from rl.forward import PolicyForward, ValueForward, token_logprobs
from rl.learner import Learner
from rl.losses import AGGREGATIONS, PolicyLossConfig, policy_loss, value_loss
from rl.packing import collate, group_leaves, mask_for, pack_tree
from rl.metrics import MEASURED

TOL = dict(rtol=0, atol=1e-5)


def add(tree, parent, ids, terminal=False, reward=None):
    node = tree.add_child(parent, ids, [-0.5] * len(ids), terminal=terminal)
    tree[node].reward = reward
    return node


def deep_chain() -> SearchTree:
    tree = SearchTree.new([5, 6, 7])
    node = ROOT
    for k in range(6):
        node = add(tree, node, [10 + k, 20 + k])
    tree[node].reward = 1.0
    return tree


def wide_root(finished: bool = True) -> SearchTree:
    tree = SearchTree.new([8, 9])
    for k in range(7):
        add(tree, ROOT, [30 + k] * (1 + k % 3), terminal=finished, reward=float(k % 2))
    return tree


def mcts_shaped(finished: bool = True) -> SearchTree:
    tree = SearchTree.new([4, 5, 6, 7])
    a, b = add(tree, ROOT, [40, 41]), add(tree, ROOT, [42])
    a1 = add(tree, a, [43, 44, 45])
    add(tree, a, [46], terminal=finished, reward=0.0)
    add(tree, a1, [47], terminal=finished, reward=1.0)
    add(tree, a1, [48, 49], terminal=finished, reward=0.0)
    b1 = add(tree, b, [50, 51])
    add(tree, b1, [52], terminal=finished, reward=1.0)
    add(tree, b, [53, 54, 55, 56], reward=0.0)  # an unfinished leaf, rewarded (cut by the budget)
    return tree


TREES = {"deep chain": lambda: [deep_chain()], "wide root": lambda: [wide_root(True), wide_root(False)],
         "mcts": lambda: [mcts_shaped(True), mcts_shaped(False)],
         "all three": lambda: [deep_chain(), wide_root(True), mcts_shaped(False)]}


def test_pack_tree_by_hand():
    """Prompt [4, 5, 6, 7] then nodes 1 [40, 41], 2 [42], 3 [43, 44, 45], ... in index order."""
    pack, rows = pack_tree(mcts_shaped(), leaves=[5, 4])  # leaf 5 = [47] under 3 under 1; leaf 4 = [46] under 1
    assert pack.ids == [4, 5, 6, 7, 40, 41, 43, 44, 45, 46, 47]  # node 2's branch is not on these paths
    assert pack.positions == [0, 1, 2, 3, 4, 5, 6, 7, 8, 6, 9]  # 46 follows 41 on its own path: position 6
    assert pack.predecessor == [-1, 0, 1, 2, 3, 4, 5, 6, 7, 5, 8]  # 46's predecessor is 41 (index 5)
    assert rows == [[0, 1, 2, 3, 4, 5, 6, 7, 8, 10], [0, 1, 2, 3, 4, 5, 9]]
    mask = pack.attention()
    assert mask[9].tolist() == [True] * 6 + [False] * 3 + [True, False]  # 46 sees the prompt, 40, 41 and itself
    assert mask[10].tolist() == [True] * 9 + [False, True]  # 47 sees its path, not its uncle 46
    assert not bool(mask.triu(1).any())  # never a later token


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("packing-tiny"), init_std=0.1, seed=3)


@pytest.fixture
def models(model_dir):
    """The policy and a critic whose head reads the hidden state (a fresh critic's head is zero)."""
    from transformers import AutoModelForCausalLM

    critic = ValueCritic.from_policy(model_dir)
    with torch.no_grad():
        critic.model.score.weight.normal_(std=0.1, generator=torch.Generator().manual_seed(0))
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), critic


def learner(model_dir, tmp_path, packing: bool) -> Learner:
    config = TrainConfig(model=str(model_dir), loop=LoopConfig(output_dir=str(tmp_path)),
                         learner=LearnerConfig(device="cpu", packing=packing),
                         value=ValueConfig(critic=CriticConfig(enabled=True)))
    return Learner(config)


def test_group_leaves_by_hand():
    """Leaves depth first: 5 [47], 6 [48, 49] (both under 3 under 1), 4 [46] (under 1), 8 [52], 9 [53..56].
    With at most 13 tokens a pack: the prompt (4) + 40 41 (2) + 43 44 45 (3) + 47 (1) = 10, + 48 49 = 12;
    4 would make 13: fits; 8 needs 42, 50 51, 52 (+4 = 17): a new pack 4 + 1 + 2 + 1 = 8, then 9 (+4 = 12)."""
    tree = mcts_shaped()
    assert group_leaves(tree, [4, 5, 6, 8, 9], None) == [[5, 6, 4, 8, 9]]
    assert group_leaves(tree, [4, 5, 6, 8, 9], 13) == [[5, 6, 4], [8, 9]]
    assert group_leaves(tree, [4, 5, 6, 8, 9], 5) == [[5], [6], [4], [8], [9]]  # each path alone is longer


@pytest.mark.parametrize("pack_tokens", [None, 12])
@pytest.mark.parametrize("shape", sorted(TREES))
def test_logits_logprobs_entropies_and_values_equal_the_rows(models, model_dir, tmp_path, shape, pack_tokens):
    policy, critic = models
    batch = batch_from_trees(TREES[shape](), pad_token_id=0, pack_tokens=pack_tokens)
    rows = list(range(len(batch)))
    # logits: row b's token t is predicted at row position t - 1, and at its predecessor when packed
    row_logits = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, L, V)
    packed = collate(batch.packs, pad_token_id=0)
    hidden = policy.get_decoder()(input_ids=packed["input_ids"], position_ids=packed["position_ids"],
                                  attention_mask=mask_for(policy, packed["attention"], torch.float32)).last_hidden_state
    packed_logits = policy.lm_head(hidden)  # (G, N, V)
    for b in rows:
        g = int(batch.row_pack[b])
        for t in range(1, int(batch.attention_mask[b].sum())):
            j = int(batch.packed_index[b, t])
            torch.testing.assert_close(packed_logits[g, packed["predecessor"][g, j]], row_logits[b, t - 1], **TOL)
    on, off = learner(model_dir, tmp_path, True), learner(model_dir, tmp_path, False)
    for module, entropy in ((PolicyForward(policy), "log"), (ValueForward(critic), None)):
        packed_out, packed_entropy, width = on.forward(module, batch, rows, on.device, entropy)
        row_out, row_entropy, _ = off.forward(module, batch, rows, off.device, entropy)
        mask = batch.attention_mask[:, :width].bool()
        torch.testing.assert_close(packed_out[mask], row_out[mask], **TOL)
        if entropy is not None:
            torch.testing.assert_close(packed_entropy[mask], row_entropy[mask], **TOL)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_every_loss_aggregation_and_its_gradients_equal_the_rows(models, model_dir, tmp_path, aggregation):
    policy, critic = models
    batch = batch_from_trees(TREES["all three"](), pad_token_id=0)
    rows = list(range(len(batch)))
    config = PolicyLossConfig(aggregation=aggregation, max_length=16, entropy_coef=0.01)
    advantages = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    results = []
    for packing in (True, False):
        run = learner(model_dir, tmp_path, packing)
        policy.zero_grad()
        critic.model.zero_grad()
        logp, entropy, width = run.forward(PolicyForward(policy), batch, rows, run.device, "grad")
        mask = batch.response_mask[:, :width]
        old = batch.old_logprobs[:, :width]
        loss, _ = policy_loss(logp, old, advantages[:, :width] * mask, mask, config, entropy=entropy)
        values, _, _ = run.forward(ValueForward(critic), batch, rows, run.device)
        v_loss, _ = value_loss(values, torch.full_like(values, 0.5), batch.token_values[:, :width], mask)
        (loss + v_loss).backward()
        grads = torch.cat([p.grad.flatten() for p in [*policy.parameters(), *critic.model.parameters()]])
        results.append((loss.detach(), v_loss.detach(), grads))
    (loss_p, v_p, grad_p), (loss_r, v_r, grad_r) = results
    torch.testing.assert_close(loss_p, loss_r, **TOL)
    torch.testing.assert_close(v_p, v_r, **TOL)
    assert grad_r.abs().max() > 1e-4
    torch.testing.assert_close(grad_p, grad_r, **TOL)


def test_packing_puts_each_node_through_the_learner_once():
    batch = batch_from_trees([mcts_shaped()], pad_token_id=0)
    row_tokens = int(batch.attention_mask.sum())
    packed_tokens = sum(len(p) for p in batch.packs)
    # rows: 5 leaves repeat the prompt (4) and their ancestors; packed: 4 + 2 + 1 + 3 + 1 + 1 + 2 + 2 + 1 + 4 tokens
    assert packed_tokens == 21 and row_tokens == 4 * 5 + (2 + 3 + 1) + (2 + 3 + 2) + (2 + 1) + (1 + 2 + 1) + (1 + 4)


def test_a_model_without_position_ids_falls_back_to_rows(tmp_path, caplog):
    """BLOOM places tokens with ALiBi biases computed from the 2D mask and takes no position ids: it
    cannot take a packed tree, so the learner warns once and runs row by row, with the same numbers."""
    import logging

    from transformers import BloomConfig, BloomForCausalLM

    from planner.policy.local_models import build_char_tokenizer

    folder = tmp_path / "bloom"
    tokenizer = build_char_tokenizer()
    BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=1, n_head=2)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with caplog.at_level(logging.WARNING, logger="rl.learner"):
        run = Learner(TrainConfig(
            model=str(folder),
            loop=LoopConfig(output_dir=str(tmp_path)),
            learner=LearnerConfig(device="cpu", packing=True),
            value=ValueConfig(critic=CriticConfig(enabled=False))))
    assert not run.packed and "tree packing is not supported for this model" in caplog.text
    batch = batch_from_trees([mcts_shaped()], pad_token_id=0)
    logp, _, width = run.forward(run.policy_forward, batch, list(range(len(batch))), run.device, "none")
    expected, _ = token_logprobs(run.policy, batch.input_ids[:, :width], batch.attention_mask[:, :width])
    torch.testing.assert_close(logp, expected, **TOL)


def test_an_rl_run_with_packing_reaches_the_metrics_of_one_without(model_dir, tmp_path):
    """Two MCTS iterations (critic on, minibatches) with packing on and off from the same seed. The
    first iteration's metrics are computed before any update: equal to float rounding. The second
    iteration searches with weights that went through one AdamW step in each run; AdamW can move a
    near-zero-gradient entry by about lr in either direction, so its weights differ by up to ~lr in
    a few entries, which is too little to change this tiny model's seeded samples: the trees, the
    rewards and the losses stay equal to 1e-4."""
    from planner.strategies import MCTSConfig
    from rl.trainer import SearchTrainer

    from test_trainer import PROBLEMS, digit_fraction  # noqa: E402

    histories = []
    for packing in (True, False):
        config = TrainConfig(
            model=str(model_dir),
            loop=LoopConfig(output_dir=str(tmp_path / str(packing)), iterations=2, prompts_per_iteration=4, seed=0),
            search=TreeSearchConfig(strategy="mcts",
                                    mcts=MCTSConfig(num_simulations=4, num_candidates=2, leaves_per_round=2,
                                                    max_step_tokens=4, max_steps=3, step_delimiter=" ",
                                                    temperature=1.0)),
            learner=LearnerConfig(lr=1e-4, minibatches=2, packing=packing, device="cpu"),
            value=ValueConfig(critic=CriticConfig(lr=1e-3)))
        histories.append(SearchTrainer(config, PROBLEMS, digit_fraction).run(progress=False))
    measured = MEASURED
    for packed, rows in zip(*histories):
        assert packed.keys() == rows.keys()
        for key in packed.keys() - measured:
            assert packed[key] == pytest.approx(rows[key], abs=1e-4), key
