"""The closed search-train loop on a tiny model: learning, the critic, NaN safety, configs (a killed run's
resume: tests/test_checkpoint_faults.py)."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from planner.strategies import BestOfNConfig, MCTSConfig
from rl.config import CriticConfig, TrainConfig
from rl.losses import PolicyLossConfig
from rl.metrics import read_metrics
from rl.trainer import SearchTrainer
from test_metrics_doc import assert_documented  # tests/ is on sys.path under pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Prompt:
    question: str
    reference: str = ""


PROBLEMS = [Prompt(f"write digits {i}") for i in range(8)]


def digit_fraction(text: str, problem) -> float:
    """A dense toy reward the random tiny model can learn in a few updates."""
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


SEARCH = dict(best_of_n=BestOfNConfig(n=6, max_tokens=12, temperature=1.0),
              mcts=MCTSConfig(num_simulations=6, max_step_tokens=4, max_steps=3, step_delimiter=" ", temperature=1.0))


def merged(base: dict, changes: dict) -> dict:
    """`base` (TrainConfig's fields, its parts as dicts) with `changes` applied part by part: a part given
    as a dict updates those fields of the base's part."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def config(model_dir, out, **changes) -> TrainConfig:
    """The tests' TrainConfig; `changes`: parts (as dicts of the fields to change) or the model."""
    base = dict(model=str(model_dir), loop=dict(output_dir=str(out), iterations=6, prompts_per_iteration=4, seed=0),
                search=dict(strategy="best_of_n", **SEARCH), learner=dict(lr=3e-3), algorithm=dict(estimator="grpo"))
    return TrainConfig(**merged(base, changes))


def test_grpo_raises_reward_and_changes_every_parameter(rl_model_dir, tmp_path):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, value=dict(critic=CriticConfig(enabled=False)),
                                   engine=dict(share_weights=False)), PROBLEMS, digit_fraction)
    assert trainer.engine.model is not trainer.learner.policy  # a copy, kept current by pushes
    before = {k: v.clone() for k, v in trainer.learner.policy.named_parameters()}
    history = trainer.run(progress=False)
    rewards = [m["reward_mean"] for m in history]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.03, rewards
    unchanged = [k for k, v in trainer.learner.policy.named_parameters() if torch.equal(v, before[k])]
    assert not unchanged, unchanged
    # the engine serves the learner's weights after every push
    served = trainer.engine.model.state_dict()
    assert all(torch.equal(served[k], v) for k, v in trainer.learner.policy.state_dict().items())
    rows = read_metrics(tmp_path)
    assert [r["iteration"] for r in rows] == list(range(6))
    assert_documented(rows)
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 7
    assert (tmp_path / "checkpoint" / "policy" / "config.json").is_file()


def test_mcts_trees_train_the_critic_and_its_error_on_new_nodes_falls(rl_model_dir, tmp_path):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, search=dict(strategy="mcts"),
                                   algorithm=dict(estimator="tree"), loop=dict(iterations=5), learner=dict(lr=1e-3),
                                   value=dict(critic=CriticConfig(lr=3e-3))), PROBLEMS, digit_fraction)
    history = trainer.run(progress=False)
    errors = [m["critic_heldout_mse"] for m in history]  # measured on each iteration's new trees, before training
    assert sum(errors[1:]) / 4 < 0.6 * errors[0], errors
    assert all(m["tree_nodes"] > 1 + 4 for m in history)  # real trees, not single samples
    assert_documented(history)
    # the trained critic guided the searches after the first iteration
    assert trainer._scorer(PROBLEMS[0]) is trainer.learner.critic


def test_a_critic_on_a_smaller_models_trunk_learns_and_another_vocabulary_is_refused(rl_model_dir, tmp_path):
    """`CriticConfig.model`: the critic copies the trunk of a smaller model that shares the policy's vocabulary
    and learns the trees' values as the policy-trunk critic does; a trunk with another vocabulary would read
    the policy's token ids as other tokens, so it is one clear error before any search."""
    from planner.policy.local_models import build_tiny_llama

    small = build_tiny_llama(tmp_path / "small", hidden_size=16, num_layers=1, seed=2)
    trainer = SearchTrainer(config(rl_model_dir, tmp_path / "run", search=dict(strategy="mcts"),
                                   algorithm=dict(estimator="tree"), loop=dict(iterations=5), learner=dict(lr=1e-3),
                                   value=dict(critic=CriticConfig(enabled=True, lr=3e-3, model=str(small)))), PROBLEMS,
                            digit_fraction)
    trunk = trainer.learner.critic.model.config
    assert (trunk.hidden_size, trunk.num_hidden_layers) == (16, 1)  # the policy's is (64, 2)
    history = trainer.run(progress=False)
    errors = [m["critic_heldout_mse"] for m in history]
    assert sum(errors[1:]) / 4 < 0.6 * errors[0], errors
    other = build_tiny_llama(tmp_path / "other", alphabet="abc xyz", hidden_size=16, num_layers=1)
    with pytest.raises(ValueError, match="has another vocabulary than the policy .* leave CriticConfig.model empty"):
        SearchTrainer(config(rl_model_dir, tmp_path / "bad", value=dict(critic=CriticConfig(enabled=True,
                                                                                            model=str(other)))),
                      PROBLEMS,
                      digit_fraction)


def test_a_scorer_folder_values_every_iterations_search(rl_model_dir, tmp_path):
    """`TrainConfig.search.scorer`: a folder that loads as a scorer (here the policy's own weights noted as a
    generative verifier) guides the search from the first iteration on, and its FLOPs are logged."""
    import shutil

    from planner.likelihood import LikelihoodVerifier
    from planner.prm_scorers import SCORER_FILE

    verifier = tmp_path / "verifier"
    shutil.copytree(rl_model_dir, verifier)
    (verifier / SCORER_FILE).write_text(json.dumps({"format": "likelihood"}))
    trainer = SearchTrainer(config(rl_model_dir, tmp_path / "run", search=dict(strategy="mcts", scorer=str(verifier)),
                                   loop=dict(iterations=2)),
                            PROBLEMS, digit_fraction)
    assert isinstance(trainer._scorer(PROBLEMS[0]), LikelihoodVerifier)
    history = trainer.run(progress=False)
    per_token = 2.0 * trainer.search_scorer.num_parameters  # a forward over each scored token
    assert all(m["scorer_flops"] > 0 and m["scorer_flops"] % per_token == 0 for m in history), history
    assert trainer._scorer(PROBLEMS[0]) is trainer.search_scorer  # not the critic after the first iteration
    with pytest.raises(ValueError, match="scorer format must be one of"):
        SearchTrainer(config(rl_model_dir, tmp_path / "bad", search=dict(strategy="mcts", scorer=str(rl_model_dir))),
                      PROBLEMS,
                      digit_fraction)


def test_ppo_with_gae_runs_and_fits_the_value(rl_model_dir, tmp_path):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, algorithm=dict(estimator="gae"), loop=dict(iterations=3),
                                   value=dict(critic=CriticConfig(target="gae", lr=3e-3))), PROBLEMS, digit_fraction)
    history = trainer.run(progress=False)
    assert all(torch.isfinite(torch.tensor(m["value_loss"])) for m in history)
    assert history[-1]["value_loss"] < history[0]["value_loss"]
    assert_documented(history)


def first_update_gradient(trainer) -> torch.Tensor:
    """Run one iteration and return the policy gradient of its first optimizer step (after clipping)."""
    grads, step = [], trainer.learner.optimizer.step

    def recording_step(*args, **kwargs):
        if not grads:
            grads.append(torch.cat([p.grad.flatten() for p in trainer.learner.policy.parameters()]))
        return step(*args, **kwargs)

    trainer.learner.optimizer.step = recording_step
    metrics = trainer.step()
    return grads[0], metrics


def test_engine_logprobs_as_old_logprobs_give_the_same_update(rl_model_dir, tmp_path):
    """old_logprobs="engine" skips the learner's no-grad forward; on CPU float32 the engine's
    log-probabilities equal the learner's up to rounding, so the first update's gradient is the same.

    Why the tolerance holds on any CPU: the two runs differ only in old_logp, by at most the measured
    gap (asserted < 1e-4). The first minibatch's per-token gradient is -A_t * r_t * grad log p_t with
    r_t = exp(logp_t - old_logp_t), so each gradient entry moves by at most |r_e - r_l| ~ gap times the
    sum of the magnitudes of its terms; with gap <= 1e-4 that is far inside 1e-3 of the largest
    entry. Weights after AdamW are NOT compared: Adam divides by sqrt(v), so a near-zero gradient
    entry whose last bits differ moves by about lr either way, and such a test passes on one CPU's
    rounding and fails on another's. Later minibatches are not compared for the same reason (they
    start from weights that went through Adam)."""
    grads, gaps = [], []
    for source in ("learner", "engine"):
        trainer = SearchTrainer(config(rl_model_dir, tmp_path / source, loop=dict(iterations=1),
                                       learner=dict(minibatches=2), algorithm=dict(old_logprobs=source),
                                       value=dict(critic=CriticConfig(enabled=False))), PROBLEMS,
                                digit_fraction)
        grad, metrics = first_update_gradient(trainer)
        grads.append(grad)
        gaps.append(metrics["engine_learner_logprob_gap"])
    assert max(gaps) < 1e-4
    assert grads[0].abs().max() > 1e-3  # a real gradient
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-3 * float(grads[0].abs().max()))


def test_nan_loss_skips_the_update_without_changing_weights(rl_model_dir, tmp_path, caplog):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, loop=dict(iterations=1),
                                   value=dict(critic=CriticConfig(enabled=False))),
                            PROBLEMS, lambda text, p: float("nan"))
    before = {k: v.clone() for k, v in trainer.learner.policy.named_parameters()}
    with caplog.at_level(logging.WARNING, logger="rl.trainer"):
        metrics = trainer.step()
    assert metrics["policy_skipped"] == 1.0
    assert "update skipped" in caplog.text
    assert all(torch.equal(v, before[k]) for k, v in trainer.learner.policy.named_parameters())


def test_trees_and_rows_carry_the_system_message_and_prefill(rl_model_dir, tmp_path):
    """The prompt the engine samples from and the learner trains on is the chat template with the
    configured system message and assistant prefill (written out by hand for the char template)."""
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, loop=dict(iterations=1, prompts_per_iteration=2),
                                   engine=dict(system_prompt="Digits only.", assistant_prefill="1"),
                                   value=dict(critic=CriticConfig(enabled=False))), PROBLEMS[:2], digit_fraction)
    tok = trainer.tokenizer
    expected = tok.encode("<|system|>Digits only.\n<|user|>write digits 0\n<|assistant|>1", add_special_tokens=False)
    assert trainer.prompt_ids(PROBLEMS[0]) == expected
    trees, _ = trainer.grow_trees(PROBLEMS[:1], seed=0)
    assert trees[0].prompt_ids == expected
    from rl.batch import batch_from_trees
    batch = batch_from_trees(trees, trainer.pad_id)
    first = batch.input_ids[0].tolist()
    assert first[:len(expected)] == expected and not batch.response_mask[0, :len(expected)].any()
    metrics = trainer.step()  # and the seconds of each phase: search, learner update, weight push
    phases = [metrics[k] for k in ("search_seconds", "learner_seconds", "push_seconds")]
    assert all(s > 0 for s in phases) and sum(phases) <= metrics["seconds"]


def test_dynamic_sampling_skips_an_iteration_whose_groups_all_tie(rl_model_dir, tmp_path):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, loop=dict(iterations=1),
                                   algorithm=dict(drop_zero_variance_groups=True),
                                   value=dict(critic=CriticConfig(enabled=False))), PROBLEMS, lambda text, problem: 0.0)
    before = {k: v.clone() for k, v in trainer.learner.policy.named_parameters()}
    metrics = trainer.step()
    assert metrics["policy_skipped"] == 1.0 and metrics["zero_variance_groups"] == 1.0
    assert metrics["reward_mean"] == 0.0 and metrics["trajectories"] == 4 * 6  # every leaf, though none trained
    assert all(torch.equal(v, before[k]) for k, v in trainer.learner.policy.named_parameters())
    trainer.reward_fn = digit_fraction  # groups whose rewards differ: an update
    metrics = trainer.step()
    assert metrics["policy_skipped"] == 0.0 and metrics["trajectories"] == 4 * 6
    assert not all(torch.equal(v, before[k]) for k, v in trainer.learner.policy.named_parameters())


def test_trainable_trains_only_the_matching_parameters(rl_model_dir, tmp_path):
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, loop=dict(iterations=1),
                                   learner=dict(trainable=r"model\.layers\.1\.|lm_head"),
                                   value=dict(critic=CriticConfig(enabled=False))), PROBLEMS, digit_fraction)
    before = {k: v.clone() for k, v in trainer.learner.policy.named_parameters()}
    trainer.run(progress=False)
    moved = {k for k, v in trainer.learner.policy.named_parameters() if not torch.equal(v, before[k])}
    chosen = {k for k in before if k.startswith("model.layers.1.") or k == "lm_head.weight"}
    assert moved == chosen  # every chosen parameter moved, none of the others
    state = trainer.learner.optimizer.state
    assert len(state) == len(chosen)  # AdamW holds state for the trained parameters only
    assert trainer.engine.model is trainer.learner.policy  # the transformers engine serves the learner's module
    with pytest.raises(ValueError, match=r"trainable='nothing' matches none of the policy's parameters"):
        SearchTrainer(config(rl_model_dir, tmp_path / "none", learner=dict(trainable="nothing")), PROBLEMS,
                      digit_fraction)


def test_progress_shows_each_phase_of_an_iteration_only_when_asked(rl_model_dir, tmp_path, capsys):
    c = config(rl_model_dir, tmp_path, loop=dict(iterations=2), value=dict(critic=CriticConfig(enabled=False)))
    trainer = SearchTrainer(c, PROBLEMS, digit_fraction)
    capsys.readouterr()
    trainer.step()  # outside run(progress=True): no bar at all
    assert "search" not in capsys.readouterr().err
    trainer.run(progress=True)  # the second iteration
    shown = capsys.readouterr().err
    assert "search-train" in shown  # the iterations' bar, and under it the phases (trees, then minibatches)
    assert f"search:   0%|          | 0/{c.loop.prompts_per_iteration} " in shown
    assert f"learn:   0%|          | 0/{c.learner.epochs * c.learner.minibatches} " in shown


@pytest.mark.parametrize("changes, message", [
    ({"algorithm": {"estimator": "ppo2"}},
     r"TrainConfig.algorithm.estimator must be one of \[.*'grpo'.*\]; got 'ppo2'"),
    ({"learner": {"minibatches": 3}}, r"not divisible into learner.minibatches=3"),
    ({"search": {"strategy": "dfs"}}, r"TrainConfig.search.strategy must be one of"),
    ({"algorithm": {"estimator": "grpo"}, "value": {"critic": CriticConfig(target="gae")}},
     r"value.critic.target='gae' regresses GAE returns"),
    ({"search": {"mcts": MCTSConfig(temperature=0.0), "strategy": "mcts"}},
     r"TrainConfig.search.mcts.temperature must be a number > 0"),
    ({"algorithm": {"old_logprobs": "cache"}},
     r"TrainConfig.algorithm.old_logprobs must be one of \['engine', 'learner'\]; got 'cache'"),
    ({"learner": {"trainable": "layers.("}},
     r"TrainConfig.learner.trainable must be a regular expression or None .*; got 'layers.\('"),
    ({"algorithm": {"estimator": "gae"}, "value": {"critic": CriticConfig(enabled=False)}},
     r"TrainConfig.algorithm.estimator='gae' needs the critic"),
])
def test_bad_configs_raise_one_clear_error(changes, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        config("m", tmp_path, **changes)


def test_a_critic_is_built_only_when_something_reads_it(tmp_path):
    from rl.config import LoopVerifierConfig

    def trains(**changes):
        return config("unused-model", tmp_path, **changes).trains_critic

    mcts = {"strategy": "mcts"}
    assert not trains()  # GRPO over best-of-N groups reads no value
    assert trains(search=mcts)  # it guides the search from the second iteration on
    assert not trains(search={**mcts, "scorer": "some-scorer-folder"})  # a scorer folder guides it instead
    assert not trains(search=mcts, value={"loop_verifier": LoopVerifierConfig(model="some-folder")})
    assert not trains(search=mcts, value={"critic": CriticConfig(use_as_scorer=False)})
    assert trains(algorithm={"estimator": "gae"}, value={"critic": CriticConfig(target="gae")})  # GAE reads its values
    assert trains(value={"critic": CriticConfig(enabled=True)})
    assert not trains(search=mcts, value={"critic": CriticConfig(enabled=False)})


def test_bad_loss_epsilon_raises():
    with pytest.raises(ValueError, match="epsilon_low must be in"):
        PolicyLossConfig(epsilon_low=0.0)


def train_command(model_dir, out, iterations, *extra):
    return [sys.executable, str(REPO / "scripts" / "train.py"), "--task", "gsm8k", "--split", "test", "--limit", "8",
            "--model", str(model_dir), "--loop.output_dir", str(out), "--loop.iterations", str(iterations),
            "--loop.prompts_per_iteration", "2", "--search.strategy", "mcts", "--search.mcts.num_simulations", "4",
            "--search.mcts.max_step_tokens", "6", "--search.mcts.max_steps", "2", "--search.mcts.step_delimiter", " ",
            "--algorithm.estimator", "tree", "--learner.lr", "3e-3", "--loop.deterministic", "true", "--loop.seed", "3",
            "--loop.checkpoint_every", "1", "--quiet", *extra]


@pytest.mark.vllm
@pytest.mark.parametrize("in_process", [False, True])
def test_vllm_engine_logprobs_equal_the_learners_after_each_weight_push(rl_model_dir, tmp_path, in_process):
    """The engine in its own process (weights pickled from CPU memory) or in the trainer's (tensors handed
    over as they are): after every push it samples with the learner's weights. On the CPU the engine's
    sleep around the learner phase is a no-op (no accelerator memory to free): ~microseconds."""
    pytest.importorskip("vllm")
    trainer = SearchTrainer(config(rl_model_dir, tmp_path, engine=dict(backend="vllm", in_process=in_process),
                                   loop=dict(iterations=3, debug=True),
                                   value=dict(critic=CriticConfig(enabled=False))), PROBLEMS,
                            digit_fraction)
    history = trainer.run(progress=False)  # debug=True raises if the gap exceeds 1e-3
    trainer.engine.close()
    assert all(m["engine_learner_logprob_gap"] <= 1e-3 for m in history)
    assert history[-1]["reward_mean"] != history[0]["reward_mean"]  # the engine serves the new weights
    assert all(m["engine_sleep_seconds"] < 0.05 for m in history)
