"""Ready-made training settings for a kind of machine, and search-guided RL in one call.

    import rl
    from verifiers import load_task

    history = rl.train("smollm2", load_task("custom", path="problems.jsonl"), iterations=2)

`PRESETS` maps a name to a function `(model, output_dir, iterations) -> TrainConfig`; `preset_config(...)`
returns that config for you to change before handing it to `SearchTrainer`, and `train(...)` runs it.
Each preset says what it chose and why; the times and memory they give are measured in
docs/benchmarks.md ("A first run on a CPU").
"""

from __future__ import annotations

from collections.abc import Callable

from planner.logs import configure_logging
from planner.strategies import BestOfNConfig
from rl.config import TrainConfig
from rl.config_parts import AlgorithmConfig, EngineConfig, LearnerConfig, LoopConfig, TreeSearchConfig
from rl.trainer import SearchTrainer
from verifiers.tasks import load_task
from verifiers.types import Task

__all__ = ["PRESETS", "cpu_preset", "preset_config", "train"]


def cpu_preset(model: str, output_dir: str, iterations: int) -> TrainConfig:
    """GRPO on best-of-4 groups for a small model (about 135M parameters) on a few CPU cores.

    - best-of-N, not MCTS: one engine call per iteration, the cheapest search that gives GRPO its groups;
    - the transformers engine serving the learner's own module (`EngineConfig.share_weights`): the weights
      exist once and nothing is pushed after an update, where vLLM would add an engine process, its KV
      cache and a copy of the weights;
    - 4 problems x 4 samples of at most 256 tokens per iteration: a GRPO batch of 16 rows;
    - dynamic sampling (DAPO): groups whose samples all got the same reward carry no signal and are not
      trained on; an iteration with no other group makes no update;
    - no KL term and no critic (GRPO reads neither), so no reference model and no value model are built;
    - gradient checkpointing, micro-batches of 1,024 padded tokens and chunked log-probabilities: the
      update's memory falls to about a quarter of plain float32's (docs/benchmarks.md, "Learner memory and precision");
    - learning rate 1e-5 (AdamW), in the usual range for fine-tuning a small pretrained LM with GRPO;
    - 2 torch threads: search and update take turns, and each gains from a second core
      (docs/benchmarks.md, "Learner threads").
    """
    return TrainConfig(
        model=model,
        engine=EngineConfig(backend="hf"),
        search=TreeSearchConfig(strategy="best_of_n",
                                best_of_n=BestOfNConfig(n=4, max_tokens=256, temperature=1.0)),
        algorithm=AlgorithmConfig(estimator="grpo", drop_zero_variance_groups=True),
        learner=LearnerConfig(lr=1e-5, gradient_checkpointing=True, micro_batch_tokens=1024, logprob_chunk=256),
        loop=LoopConfig(iterations=iterations, prompts_per_iteration=4, output_dir=output_dir, threads=2,
                        checkpoint_every=max(1, min(5, iterations))),
    )


PRESETS: dict[str, Callable[[str, str, int], TrainConfig]] = {"cpu": cpu_preset}
"""Preset name -> `(model, output_dir, iterations) -> TrainConfig`."""


def preset_config(name: str, model: str, output_dir: str = "runs/train", iterations: int = 10) -> TrainConfig:
    """The `TrainConfig` of preset `name` for `model` (a save_pretrained folder, or a name such as
    "smollm2"): change any part of it, then train with `SearchTrainer(config, ...)`."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; the presets are {sorted(PRESETS)}")
    return PRESETS[name](model, output_dir, iterations)


def train(model: str, task: Task | str, *, preset: str = "cpu", iterations: int = 10,
          output_dir: str = "runs/train", resume: bool = False, progress: bool = True,
          verbose: bool = False) -> list[dict]:
    """Search-guided RL of `model` on `task` with a preset; returns each iteration's metrics
    (docs/metrics.md). `task`: a `verifiers.Task` (`load_task(...)`) or a built-in task's name, whose
    "train" split is used. Metrics and checkpoints go to `output_dir`; `resume=True` goes on from its
    newest checkpoint. Third-party warnings and logs are silenced unless `verbose`."""
    configure_logging(verbose)
    if isinstance(task, str):
        task = load_task(task, split="train")  # the data is checked here, before the model loads
    config = preset_config(preset, model, output_dir, iterations)
    trainer = SearchTrainer(config, task.problems, task.reward, extract=task.verifier.extract, resume=resume)
    return trainer.run(progress=progress)
