"""The presets and the one-call form: `rl.train` runs a preset end to end, `scripts/train.py --preset` starts
from the same config, and options given beside it override it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import rl
from rl.presets import PRESETS, preset_config
from verifiers import load_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import train as train_script  # noqa: E402  (scripts/ is not a package)


def word_problems_file(path: Path) -> Path:
    rows = [{"question": f"Tom has {a} apples and buys 2 more. How many apples does he have?", "answer": a + 2}
            for a in range(2, 10)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_cpu_preset_is_grpo_on_best_of_n_groups_without_a_critic_or_a_reference():
    config = preset_config("cpu", "smollm2", "runs/x", 3)
    assert (config.search.strategy, config.algorithm.estimator, config.loop.iterations) == ("best_of_n", "grpo", 3)
    assert config.engine.backend == "hf" and config.engine.share_weights  # one copy of the weights
    assert not config.trains_critic and not config.algorithm.uses_reference
    assert config.algorithm.drop_zero_variance_groups and config.learner.gradient_checkpointing
    with pytest.raises(ValueError, match=r"unknown preset 'gpu'; the presets are \['cpu'\]"):
        preset_config("gpu", "smollm2")
    assert set(PRESETS) == {"cpu"}


def test_rl_train_runs_a_preset_on_a_task_and_writes_its_metrics(tiny_model_dir, tmp_path):
    task = load_task("custom", path=word_problems_file(tmp_path / "mine.jsonl"))
    history = rl.train(str(tiny_model_dir), task, iterations=1, output_dir=str(tmp_path / "run"), progress=False)
    assert len(history) == 1 and history[0]["trajectories"] == 4 * 4  # 4 problems x best-of-4
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_the_cli_preset_is_the_same_config_and_given_options_override_it(tiny_model_dir, tmp_path, monkeypatch):
    captured = {}  # the config the script hands to the trainer, which is stopped there (the run is tested above)

    class Stop(Exception):
        pass

    def capture(trainer, config, *args, **kwargs):
        captured["config"] = config
        raise Stop

    monkeypatch.setattr("rl.trainer.SearchTrainer.__init__", capture)
    data = word_problems_file(tmp_path / "mine.jsonl")
    with pytest.raises(Stop):
        train_script.main(["--model", str(tiny_model_dir), "--task", "custom", "--task_path", str(data), "--preset", "cpu",
                           "--loop.iterations", "7", "--learner.lr", "3e-6"])
    expected = preset_config("cpu", str(tiny_model_dir), "runs/train", 7)
    expected.learner.lr = 3e-6
    assert captured["config"] == expected
