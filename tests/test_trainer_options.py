"""Every estimator with every tree shape through the trainer, and the options a run can turn on:
several epochs, a reference model with KL in the reward or in the loss, the adaptive KL target,
the TensorBoard record, strict resume, and torch settings restored after training."""

from __future__ import annotations

import pytest
import torch

from planner.strategies import BeamConfig, BestOfNConfig, MCTSConfig
from rl.config import CriticConfig, TrainConfig
from rl.estimators import ADVANTAGE_ESTIMATORS, NEEDS_CRITIC
from rl.trainer import SearchTrainer

from test_trainer import PROBLEMS, digit_fraction, merged  # noqa: E402  (tests/ is on sys.path under pytest)

SEARCH = dict(best_of_n=BestOfNConfig(n=4, max_tokens=8, temperature=1.0),
              beam=BeamConfig(num_beams=4, beam_width=2, max_step_tokens=3, max_steps=2, step_delimiter=" ",
                              temperature=1.0),
              mcts=MCTSConfig(num_simulations=4, num_candidates=2, leaves_per_round=2, max_step_tokens=3, max_steps=2,
                              step_delimiter=" ", temperature=1.0))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("options-tiny"), init_std=0.1, seed=1)


def make(model_dir, out, **changes) -> SearchTrainer:
    """A trainer of the tests' TrainConfig; `changes`: parts (as dicts of the fields to change) or the model."""
    base = dict(model=str(model_dir), loop=dict(output_dir=str(out), iterations=1, prompts_per_iteration=2, seed=0),
                search=dict(strategy="best_of_n", **SEARCH), learner=dict(lr=1e-3),
                value=dict(critic=CriticConfig(enabled=False)))
    return SearchTrainer(TrainConfig(**merged(base, changes)), PROBLEMS, digit_fraction)


def weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("strategy", ["best_of_n", "beam", "mcts"])
@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_trains_on_every_tree_shape(model_dir, tmp_path, estimator, strategy):
    critic = CriticConfig(enabled=estimator in NEEDS_CRITIC, target="gae" if estimator == "gae" else "tree")
    trainer = make(model_dir, tmp_path, algorithm=dict(estimator=estimator), search=dict(strategy=strategy),
                   value=dict(critic=critic))
    before = weights(trainer.learner.policy)
    metrics = trainer.step()
    assert metrics["policy_skipped"] == 0.0 and torch.isfinite(torch.tensor(metrics["pg_loss"]))
    if metrics["zero_variance_groups"] < 1 or estimator in ("reinforce", "reward_to_go", "gae"):
        assert not torch.equal(weights(trainer.learner.policy), before), "the update moved nothing"


def test_several_epochs_make_more_updates(model_dir, tmp_path):
    trainer = make(model_dir, tmp_path, learner=dict(epochs=3, minibatches=2), algorithm=dict(old_logprobs="learner"))
    steps = []
    step = trainer.learner.optimizer.step
    trainer.learner.optimizer.step = lambda *a, **k: (steps.append(1), step(*a, **k))[1]
    metrics = trainer.step()
    assert len(steps) == 3 * 2
    assert metrics["ratio_mean"] != 1.0  # later minibatches see a policy that has moved


@pytest.mark.parametrize("placement", ["loss", "reward"])
def test_reference_model_kl(model_dir, tmp_path, placement):
    algorithm = {"loss": {"kl_coef": 0.5}} if placement == "loss" else {"kl_placement": "reward",
                                                                        "kl_reward_coef": 0.5}
    trainer = make(model_dir, tmp_path, algorithm=algorithm, loop=dict(iterations=3), learner=dict(lr=3e-3))
    assert trainer.learner.reference is not None
    history = [trainer.step() for _ in range(3)]
    # the first iteration samples from the reference itself: KL 0; then the policy moves away from it
    assert history[0]["kl_to_reference"] == pytest.approx(0.0, abs=1e-4)
    assert history[-1]["kl_to_reference"] > 1e-4
    if placement == "loss":
        assert "kl" in history[-1]  # the in-loss KL term is logged by the policy loss
    assert not any(p.requires_grad for p in trainer.learner.reference.parameters())


def test_adaptive_kl_coefficient_moves_towards_the_target(model_dir, tmp_path):
    trainer = make(model_dir, tmp_path, loop=dict(iterations=3), learner=dict(lr=3e-3),
                   algorithm=dict(loss={"kl_coef": 0.1}, kl_target=1e-6))
    history = [trainer.step() for _ in range(3)]
    # Ziegler et al. 2019: beta *= 1 + clip(KL / target - 1, -0.2, 0.2) * n_rows / horizon (10,000), once
    # per iteration; the first iteration's KL is 0 (policy = reference), after that it is far above 1e-6
    expected = 0.1
    for m in history:
        error = min(max(m["kl_to_reference"] / 1e-6 - 1, -0.2), 0.2)
        expected *= 1 + error * m["trajectories"] / 10_000
        assert m["kl_coef"] == pytest.approx(expected, rel=1e-9)
    assert history[-1]["kl_coef"] > history[1]["kl_coef"]


def test_tensorboard_record_reads_back(model_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = make(model_dir, tmp_path, loop=dict(iterations=2))
    history = trainer.run(progress=False)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    rewards = events.Scalars("reward_mean")
    assert [e.step for e in rewards] == [0, 1]
    assert [e.value for e in rewards] == pytest.approx([m["reward_mean"] for m in history])


def test_resume_from_a_checkpoint_of_another_model_fails_clearly(model_dir, tmp_path):
    from planner.policy.local_models import build_tiny_llama

    make(model_dir, tmp_path).run(progress=False)  # leaves a checkpoint
    other = build_tiny_llama(tmp_path / "other", hidden_size=32, init_std=0.1, seed=2)
    config = dict(model=str(other), loop=dict(output_dir=str(tmp_path), iterations=2, prompts_per_iteration=2),
                  search=dict(strategy="best_of_n", **SEARCH), value=dict(critic=CriticConfig(enabled=False)))
    with pytest.raises(ValueError, match=r"does not match the model this run loads \(.*shape: .*resume with the "
                                         r"same --model"):
        SearchTrainer(TrainConfig(**config), PROBLEMS, digit_fraction, resume=True)


def test_torch_settings_are_restored_after_training(model_dir, tmp_path):
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    trainer = make(model_dir, tmp_path, loop=dict(threads=1 if threads != 1 else 2, deterministic=True))
    trainer.step()
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.equal(torch.get_rng_state(), rng)


def test_learner_threads_apply_to_the_update_only(model_dir, tmp_path):
    """The update runs on `learner_threads` torch threads, the search on `threads`; both restored after.
    In a fresh process: an engine earlier in a test session can pin OpenMP so that 2 threads read back as 1."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    program = f"""
import json, sys, torch
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_trainer_options import make
threads = torch.get_num_threads()
trainer = make({str(model_dir)!r}, {str(tmp_path)!r}, loop=dict(threads=1), learner=dict(threads=2))
seen = {{}}
update, grow = trainer.learner.update, trainer.grow_trees
trainer.learner.update = lambda *a, **k: (seen.setdefault("update", torch.get_num_threads()), update(*a, **k))[1]
trainer.grow_trees = lambda *a, **k: (seen.setdefault("search", torch.get_num_threads()), grow(*a, **k))[1]
trainer.step()
seen["after"] = torch.get_num_threads() == threads
print(json.dumps(seen))
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"update": 2, "search": 1, "after": True}
    with pytest.raises(ValueError, match=r"TrainConfig.learner.threads must be an integer >= 1 or None; got 0"):
        make(model_dir, tmp_path / "bad", learner=dict(threads=0))
