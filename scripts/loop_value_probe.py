"""Probe the loop's own value in the RLVR setting: RL from MCTS trees valued by the loop verifier.

The cold start and the loop verifier's starting LM see only the same `--gold` problems' gold traces (the
fixed gold budget). RL samples at temperature 1 (MCTS, 8 simulations of 4 candidate steps, 32 trees an
iteration, GRPO) with the search valued by `rl/loop_verifier.py`, which trains every iteration on the
trees' verified-correct leaves. Every `--grade_every` iterations, on held-out problems: sibling-ranking
accuracy against the process oracle of the loop verifier, of its frozen starting LM and of the policy's
step confidence (the same sibling sets, so paired), and sampled pass@1. One JSON line per event in
`<out>/log.jsonl`. The oracle grades only.

    python scripts/loop_value_probe.py --out runs/loop_probe --seed 0
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lab.cold_start import COLD_START_SFT, cold_start, pass_rates
from lab.verifier_lm import VERIFIER_SFT
from planner.likelihood import LikelihoodVerifier
from planner.policy import load_policy
from planner.scorers import ConfidenceScorer
from planner.strategies import MCTSConfig
from planner.value_eval import grade_scorers
from rl.cli import ArgumentParser, at_least, output_dir
from rl.config import (AlgorithmConfig, CriticConfig, EngineConfig, LearnerConfig, LoopConfig, LoopVerifierConfig,
                       TrainConfig, TreeSearchConfig, ValueConfig)
from rl.trainer import SearchTrainer
from verifiers.arithmetic import STEP_DELIMITER, step_value, training_problems
from verifiers.tasks import load_task


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=output_dir, required=True,
                        help="output folder (reused: models found there are kept)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the cold start, the verifier and RL")
    parser.add_argument("--gold", type=at_least(1), default=2000, help="problems whose gold traces both models see")
    parser.add_argument("--iterations", type=at_least(1), default=20, help="RL iterations")
    parser.add_argument("--grade_every", type=at_least(1), default=5, help="iterations between gradings")
    parser.add_argument("--unlikelihood", type=float, default=0.0, help="LoopVerifierConfig.unlikelihood_coef")
    parser.add_argument("--min_likelihood", type=float, default=0.0, help="LoopVerifierConfig.min_likelihood")
    args = parser.parse_args(argv)
    out, seed = Path(args.out), args.seed
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "log.jsonl", "a")

    def emit(**event):
        event["time"] = time.strftime("%H:%M:%S")
        print(json.dumps(event), flush=True)
        log.write(json.dumps(event) + "\n")
        log.flush()

    task = load_task("arithmetic", split="test")
    held_out = task.problems[:128]
    # both stop by steps and their targets, never by wall minutes (max_minutes only bounds a stuck run)
    if not (out / "sft" / "config.json").exists():
        sft = cold_start(out / "sft", num_train=args.gold, target_pass_range=(0.3, 0.6), max_minutes=120, seed=seed,
                         final_eval=False, progress=False, config=COLD_START_SFT)
        emit(stage="cold_start", steps=sft.steps, seconds=sft.seconds, last=sft.curve[-1])
    if not (out / "verifier_start" / "config.json").exists():
        start = cold_start(out / "verifier_start", config=VERIFIER_SFT, num_train=args.gold,
                           target_pass_range=(0.97, 1.0), max_minutes=120, hidden_size=32, num_layers=2, num_heads=2,
                           final_eval=False, seed=seed, progress=False)
        emit(stage="verifier_start", steps=start.steps, seconds=start.seconds, last=start.curve[-1])
    engine = load_policy(out / "sft", backend="vllm", seed=seed, threads=1)
    frozen = LikelihoodVerifier(str(out / "verifier_start"))
    search = MCTSConfig(num_simulations=8, num_candidates=4, step_delimiter=STEP_DELIMITER, max_step_tokens=16,
                        max_steps=8, temperature=1.0)
    config = TrainConfig(
        model=str(out / "sft"),
        loop=LoopConfig(output_dir=str(out / "rl"), iterations=args.iterations, prompts_per_iteration=32, seed=seed),
        engine=EngineConfig(backend="vllm"),
        search=TreeSearchConfig(strategy="mcts", mcts=search),
        algorithm=AlgorithmConfig(estimator="grpo", old_logprobs="engine"),
        learner=LearnerConfig(lr=1e-4, minibatches=4, threads=1, device="cpu"),
        value=ValueConfig(critic=CriticConfig(enabled=False),
                          loop_verifier=LoopVerifierConfig(model=str(out / "verifier_start"),
                                                           unlikelihood_coef=args.unlikelihood,
                                                           min_likelihood=args.min_likelihood)))
    trainer = SearchTrainer(config, training_problems(4000, "medium", seed=seed + 1), task.reward,
                            extract=task.verifier.extract, engine=engine)

    def grade(iteration: int) -> None:
        scorers = {"loop": trainer.loop_verifier.scorer(), "frozen": frozen, "confidence": ConfidenceScorer()}
        rows = grade_scorers(trainer.engine, held_out[:64], scorers, task, step_value, seeds=[seed], candidates=4,
                             samples=4, step_delimiter=STEP_DELIMITER, max_step_tokens=16, max_steps=8)
        emit(stage="grade", iteration=iteration,
             **{r["scorer"]: {k: r[k] for k in ("sibling_accuracy", "sibling_accuracy_interval", "step_auc")}
                for r in rows})
        sampled = pass_rates(trainer.engine, held_out, task.reward, n=4, max_tokens=64, seed=seed)
        emit(stage="pass", iteration=iteration, pass1=sampled["pass@1"],
             interval=[sampled["pass@1_low"], sampled["pass@1_high"]])

    grade(0)
    while trainer.iteration < args.iterations:
        metrics = trainer.step()
        emit(stage="iteration", iteration=metrics["iteration"], reward=metrics["reward_mean"],
             loop_value_loss=metrics.get("loop_value_loss"), verified=metrics.get("loop_value_correct"),
             seconds=metrics["seconds"])
        if trainer.iteration % args.grade_every == 0:
            grade(trainer.iteration)
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
