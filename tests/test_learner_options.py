"""The learner's memory and precision options give the update they promise (issue: GPU-ready training).

All on the CPU, from one batch of real rows (a tiny Llama's best-of-N and MCTS trees), comparing the
gradient of the first optimizer step between two settings of the same learner. Gradients, not the
weights after AdamW: Adam divides by sqrt(v), so entries of a near-zero gradient whose last bits
differ move by about lr either way (see tests/test_trainer.py).
"""

from __future__ import annotations

import math

import pytest
import torch

import rl.learner

from planner.strategies import BestOfNConfig, MCTSConfig
from rl.batch import batch_from_trees
from rl.config import CriticConfig, TrainConfig
from rl.forward import token_logprobs
from rl.learner import Learner
from rl.mismatch import mismatch_metrics, tis_weights
from rl.runtime import cpu_supports_bfloat16
from rl.trainer import SearchTrainer

from test_metrics_doc import assert_documented  # noqa: E402
from test_trainer import PROBLEMS, digit_fraction, merged  # noqa: E402  (tests/ is on sys.path under pytest)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("learner-tiny"), init_std=0.1, seed=1)


def settings(model_dir, out, **changes) -> TrainConfig:
    """The tests' TrainConfig; `changes`: parts (as dicts of the fields to change) or the model."""
    base = dict(model=str(model_dir), loop=dict(output_dir=str(out), prompts_per_iteration=4, seed=0),
                search=dict(strategy="best_of_n", best_of_n=BestOfNConfig(n=4, max_tokens=16, temperature=1.0),
                            mcts=MCTSConfig(num_simulations=4, num_candidates=2, leaves_per_round=2, max_step_tokens=4,
                                            max_steps=3, step_delimiter=" ", temperature=1.0)),
                learner=dict(lr=1e-3, max_grad_norm=1e9, device="cpu"), value=dict(critic=CriticConfig(enabled=False)))
    return TrainConfig(**merged(base, changes))


@pytest.fixture(scope="module")
def batch(model_dir, tmp_path_factory):
    """Rows of different lengths from real trees (best-of-N and MCTS), rewarded."""
    out = tmp_path_factory.mktemp("rows")
    trainer = SearchTrainer(settings(model_dir, out, search=dict(strategy="mcts")), PROBLEMS, digit_fraction)
    trees, _ = trainer.grow_trees(PROBLEMS[:3], seed=5)
    return batch_from_trees(trees, trainer.pad_id)


def first_gradients(config: TrainConfig, batch) -> dict[str, torch.Tensor]:
    """{"policy": ..., "critic": ...} gradients of the first optimizer step(s) of one update."""
    learner = Learner(config)
    grads = {}
    for name, model, optimizer in (("policy", learner.policy, learner.optimizer),
                                   ("critic", learner.critic and learner.critic.model, learner.critic_optimizer)):
        if optimizer is None:
            continue
        step = optimizer.step

        def recording(*args, _name=name, _model=model, _step=step, **kwargs):
            grads.setdefault(_name, torch.cat([p.grad.flatten().clone() for p in _model.parameters()]))
            return _step(*args, **kwargs)
        optimizer.step = recording
    learner.update(batch, iteration=0)
    return grads


@pytest.mark.parametrize("packing", [False, True])
def test_micro_batches_accumulate_the_full_batch_gradient(model_dir, tmp_path, batch, packing):
    """float32, the same rows: only the summation order differs (rows, or whole packed trees, split into
    micro-batches whose losses are normalised by the whole minibatch's token and row counts). float32
    rounding of sums of a few thousand terms is ~1e-7 relative to their magnitudes, so 1e-5 absolute
    (gradients here are ~1e-2) holds on any CPU."""
    unit = (max(len(p) for p in batch.packs) if packing else int(batch.attention_mask.sum(-1).max()))
    for aggregation in ("token_mean", "seq_mean_token_mean"):
        base = dict(value=dict(critic=CriticConfig(enabled=True, lr=1e-3)),
                    algorithm=dict(loss={"aggregation": aggregation, "entropy_coef": 0.01}))
        full = first_gradients(settings(model_dir, tmp_path, **base, learner=dict(packing=packing)), batch)
        micro = first_gradients(settings(model_dir, tmp_path, **base,
                                         learner=dict(packing=packing, micro_batch_tokens=unit + 3)), batch)
        assert len(Learner(settings(model_dir, tmp_path, learner=dict(micro_batch_tokens=unit + 3, packing=packing)))
                   .micro_batches(batch, range(len(batch)))) > 1  # really split
        for name in ("policy", "critic"):
            assert full[name].abs().max() > 1e-4, name
            torch.testing.assert_close(micro[name], full[name], rtol=0, atol=1e-5, msg=f"{aggregation} {name}")


def test_gradient_checkpointing_and_chunked_logprobs_keep_the_gradient(model_dir, tmp_path, batch):
    """The same float32 computation, recomputed (checkpointing) or with the LM head applied chunk by
    chunk: the arithmetic is identical up to summation order, so 1e-5 holds as above."""
    full = first_gradients(settings(model_dir, tmp_path), batch)["policy"]
    for changes in ({"gradient_checkpointing": True}, {"logprob_chunk": 7}, {"packing": False},
                    {"gradient_checkpointing": True, "logprob_chunk": 5, "micro_batch_tokens": 200, "packing": False}):
        other = first_gradients(settings(model_dir, tmp_path, learner=changes), batch)["policy"]
        torch.testing.assert_close(other, full, rtol=0, atol=1e-5, msg=str(changes))


def test_chunked_logprobs_equal_the_dense_ones(model_dir, batch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dense, dense_entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, entropy="log")
    chunked, chunked_entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, entropy="log", chunk_size=3)
    torch.testing.assert_close(chunked, dense, rtol=0, atol=1e-5)
    torch.testing.assert_close(chunked_entropy, dense_entropy, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
        token_logprobs(model, batch.input_ids, batch.attention_mask, chunk_size=0)


def test_bfloat16_update_is_finite_moves_the_weights_and_is_close_to_float32(model_dir, tmp_path, batch):
    """bfloat16 autocast rounds every matmul input to 8 mantissa bits (relative error 2^-9 per value);
    through a 2-layer model the gradient's direction stays within a few percent of float32's. The
    bounds below (cosine >= 0.99, relative L2 error <= 10%) leave room for any CPU's bf16 kernels. A CPU
    without bf16 instructions must refuse bfloat16 with one clear error instead."""
    if not cpu_supports_bfloat16():
        with pytest.raises(ValueError,
                           match=r"TrainConfig.learner.dtype='bfloat16' on the CPU needs bf16 instructions"):
            Learner(settings(model_dir, tmp_path, learner=dict(dtype="bfloat16")))
        return
    fp32 = first_gradients(settings(model_dir, tmp_path), batch)["policy"]
    learner = Learner(settings(model_dir, tmp_path, learner=dict(dtype="bfloat16")))
    before = torch.cat([p.detach().flatten().clone() for p in learner.policy.parameters()])
    metrics = learner.update(batch, iteration=0)
    after = torch.cat([p.detach().flatten() for p in learner.policy.parameters()])
    assert metrics["policy_skipped"] == 0.0 and math.isfinite(metrics["pg_loss"])
    assert (after - before).abs().max() > 1e-4
    assert all(p.dtype == torch.float32 for p in learner.policy.parameters())  # float32 master weights
    bf16 = first_gradients(settings(model_dir, tmp_path, learner=dict(dtype="bfloat16")), batch)["policy"]
    cosine = torch.nn.functional.cosine_similarity(bf16, fp32, dim=0)
    assert cosine >= 0.99, float(cosine)
    assert (bf16 - fp32).norm() <= 0.1 * fp32.norm()


def test_tis_weights_and_mismatch_metrics_by_hand():
    learner = torch.tensor([[-1.0, -2.0, -0.5]])
    engine = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # ratios exp(0.5) = 1.6487, exp(-1) = 0.3679, exp(0) = 1; capped at 1.5
    torch.testing.assert_close(tis_weights(learner, engine, cap=1.5), torch.tensor([[1.5, math.exp(-1.0), 1.0]]))
    metrics = mismatch_metrics(learner, engine, mask, cap=1.5)
    k3 = [(math.exp(0.5) - 1) - 0.5, (math.exp(-1.0) - 1) + 1.0]  # (r - 1) - log r on the two masked tokens
    assert metrics["engine_learner_k3"] == pytest.approx(sum(k3) / 2)
    assert metrics["tis_capped_fraction"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="cap must be > 0"):
        tis_weights(learner, engine, cap=0.0)


def test_bfloat16_engine_float32_learner_logs_the_mismatch_and_tis_weighs_it(model_dir, tmp_path):
    trainer = SearchTrainer(settings(model_dir, tmp_path, engine=dict(dtype="bfloat16"), algorithm=dict(tis_cap=2.0),
                                     loop=dict(iterations=1)),
                            PROBLEMS, digit_fraction)
    metrics = trainer.step()
    assert metrics["engine_learner_logprob_gap"] > 1e-3  # a bfloat16 engine really differs
    assert 0 < metrics["engine_learner_k3"] < 0.1
    assert 0 <= metrics["tis_capped_fraction"] < 0.5
    assert metrics["policy_skipped"] == 0.0
    assert_documented([metrics])


def test_hot_samples_are_weighted_by_pi_over_mu_and_the_first_ratio_is_one(model_dir, tmp_path, monkeypatch):
    """Search at temperature 1.6 draws tokens from mu = softmax(logits / 1.6); the update trains pi (temperature
    1). On the first minibatch, before any step, the PPO ratio pi_theta / pi_old is 1, and each token's
    surrogate is weighted by min(pi_old / mu, cap), both computed here by hand from the model's logits."""
    from transformers import AutoModelForCausalLM

    hot, cap = 1.6, 2.0
    config = settings(model_dir, tmp_path, search=dict(best_of_n=BestOfNConfig(n=4, max_tokens=16, temperature=hot)),
                      algorithm=dict(tis_cap=cap), learner=dict(minibatches=2))
    trainer = SearchTrainer(config, PROBLEMS, digit_fraction)
    trees, _ = trainer.grow_trees(PROBLEMS[:4], seed=3)
    batch = batch_from_trees(trees, trainer.pad_id)
    calls = []
    real_policy_loss = rl.learner.policy_loss

    def spy(logp, old_logp, advantages, mask, *args, importance_weights=None, **kwargs):
        calls.append((logp.detach().clone(), old_logp.clone(), importance_weights.clone(), mask.clone()))
        return real_policy_loss(logp, old_logp, advantages, mask, *args, importance_weights=importance_weights,
                                **kwargs)

    monkeypatch.setattr(rl.learner, "policy_loss", spy)
    learner = Learner(config)
    first_rows = next(learner.minibatches(batch, iteration=0, epoch=0))
    metrics = learner.update(batch, iteration=0)
    logp, old, weights, mask = calls[0]
    on = mask.bool()
    assert (logp - old)[on].abs().max() < 1e-4  # the ratio is 1 on the first minibatch
    assert "tis_weight_mean" in metrics

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()  # the weights that sampled
    width = logp.shape[1]
    ids, attention = batch.input_ids[first_rows, :width], batch.attention_mask[first_rows, :width]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()  # (b, width - 1, V)
    taken = ids[:, 1:, None]
    pi = torch.nn.functional.pad(torch.log_softmax(logits, -1).gather(-1, taken)[..., 0], (1, 0))  # (b, width)
    mu = torch.nn.functional.pad(torch.log_softmax(logits / hot, -1).gather(-1, taken)[..., 0], (1, 0))
    expected = torch.exp(pi - mu).clamp(max=cap)
    torch.testing.assert_close(weights[on], expected[on], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(old[on], pi[on], rtol=1e-4, atol=1e-4)
    assert weights[on].min() < 0.9  # tokens the hot search drew more often than pi would are weighed down


def test_a_hot_search_without_importance_weights_is_refused(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"search.mcts.temperature=1.6 .* off-policy: set algorithm.tis_cap"):
        settings(model_dir, tmp_path, search=dict(strategy="mcts", mcts=MCTSConfig(num_simulations=4,
                                                                                   temperature=1.6)))


@pytest.mark.parametrize("changes, message", [
    ({"algorithm": {"tis_cap": 2.0, "old_logprobs": "engine"}},
     r"TrainConfig.algorithm.tis_cap .* needs algorithm.old_logprobs='learner'"),
    ({"learner": {"micro_batch_tokens": 1}}, r"TrainConfig.learner.micro_batch_tokens must be an integer >= 2"),
    ({"learner": {"dtype": "float16"}}, r"TrainConfig.learner.dtype must be one of \['float32', 'bfloat16'\]"),
    ({"engine": {"memory_fraction": 1.5}}, r"TrainConfig.engine.memory_fraction must be a number in \(0, 1\)"),
])
def test_bad_learner_options_raise_one_clear_error(model_dir, tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        settings(model_dir, tmp_path, **changes)


def test_bfloat16_on_a_cpu_without_bf16_instructions_is_refused(model_dir, tmp_path, monkeypatch):
    import rl.runtime
    monkeypatch.setattr(rl.runtime, "cpu_supports_bfloat16", lambda: False)
    with pytest.raises(ValueError, match="needs bf16 instructions .* use dtype='float32'"):
        settings(model_dir, tmp_path, learner=dict(dtype="bfloat16"))


def test_a_row_longer_than_the_micro_batch_budget_is_a_clear_error(model_dir, tmp_path, batch):
    learner = Learner(settings(model_dir, tmp_path, learner=dict(micro_batch_tokens=4, packing=False)))
    with pytest.raises(ValueError, match=r"a row of \d+ tokens does not fit micro_batch_tokens=4: set "
                                         r"micro_batch_tokens >= \d+"):
        learner.update(batch, iteration=0)
    learner = Learner(settings(model_dir, tmp_path, learner=dict(micro_batch_tokens=4)))
    with pytest.raises(ValueError, match=r"a packed tree of \d+ tokens does not fit micro_batch_tokens=4"):
        learner.update(batch, iteration=0)
