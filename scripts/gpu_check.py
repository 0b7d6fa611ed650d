"""The GPU check: the search-train loop's parts on CUDA in bfloat16 with gradient checkpointing.

    python scripts/gpu_check.py                 # make gpu-check
    python scripts/gpu_check.py --model <folder> --steps 2

Needs only torch, transformers and this repository (no vLLM): the engine is the transformers
backend. In order, on the GPU:
1. a search (MCTS with the Monte-Carlo scorer) through `planner.solve`, engine in bfloat16;
2. one SFT step (`rl.train_sft`, bfloat16 autocast, gradient checkpointing);
3. one GRPO step and 4. one PPO step with the value critic (`rl.SearchTrainer`), learner in bfloat16
   autocast with float32 master weights and gradient checkpointing, engine in bfloat16.
Each learning step must give a finite loss and move the weights; the engine-learner log-probability
mismatch of the RL steps must be within bfloat16's tolerance; peak GPU memory is printed.

Without a GPU it says so and runs the same checks on the CPU in float32 as a dry run (exit 0), so the
script itself is tested on any machine. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from planner.logs import configure_logging
from verifiers.arithmetic import ARITHMETIC_ALPHABET, arithmetic_task, load_arithmetic

BF16_MAX_GAP = 0.5
"""Most |engine - learner| log-probability of one sampled token with both in bfloat16 (a bf16 logit
carries ~3 significant digits; on a CPU with bf16 instructions the tiny model measured 0.036)."""
BF16_MAX_K3 = 0.01
"""Most mean k3 KL(engine || learner) over the sampled tokens in bfloat16 (measured 7e-5 likewise)."""


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a save_pretrained folder (default: a tiny Llama built "
                                                      "offline, hidden 256, 4 layers)")
    parser.add_argument("--steps", type=int, default=1, help="RL iterations of each of GRPO and PPO (default: 1)")
    parser.add_argument("--cpu", action="store_true", help="run the dry run on the CPU even when a GPU is there")
    return parser.parse_args(argv)


def weights(model):
    import torch
    return torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])


def main(argv=None) -> int:
    import torch

    from planner import load_policy, solve
    from planner.policy.local_models import build_tiny_llama
    from planner.strategies import BestOfNConfig
    from rl import (AlgorithmConfig, CriticConfig, EngineConfig, LearnerConfig, LoopConfig, SFTConfig, SearchTrainer,
                    TrainConfig, TreeSearchConfig, ValueConfig, train_sft)

    args = parse(argv)
    configure_logging(False)
    gpu = torch.cuda.is_available() and not args.cpu
    device, dtype = ("cuda", "bfloat16") if gpu else ("cpu", "float32")
    if not gpu:
        print("No CUDA device found (torch.cuda.is_available() is False): dry run of every check on the CPU "
              "in float32. On a GPU machine the same command runs them on CUDA in bfloat16.")
    else:
        print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        model = Path(args.model) if args.model else build_tiny_llama(Path(tmp) / "model", alphabet=ARITHMETIC_ALPHABET,
                                                                     hidden_size=256, num_layers=4, num_heads=4,
                                                                     init_std=0.05, seed=0)
        task = load_arithmetic(split="test")
        problems = arithmetic_task(64, "medium", seed=1)

        print("1. search (MCTS, Monte-Carlo scorer, transformers engine)")
        start = time.perf_counter()
        policy = load_policy(model, backend="hf", dtype="bfloat16" if gpu else "float32", device=device)
        solution = solve(task.problems[0], policy, strategy="mcts", num_simulations=8, max_step_tokens=16,
                         max_steps=4, step_delimiter="\n", seed=0)
        check(len(solution.tree) > 1 and solution.compute.generated_tokens > 0,
              f"tree of {len(solution.tree)} nodes, {solution.compute.generated_tokens} tokens generated "
              f"in {time.perf_counter() - start:.1f} s")
        del policy

        print("2. one SFT step (gradient checkpointing)")
        config = SFTConfig(max_steps=1, batch_size=16, warmup_steps=0, device=device, dtype=dtype,
                           gradient_checkpointing=True, progress=False)
        from transformers import AutoModelForCausalLM
        before = weights(AutoModelForCausalLM.from_pretrained(model))
        result = train_sft(model, [(p.question, p.meta["solution"]) for p in problems], config)
        check(all(math.isfinite(x) for x in result.losses), f"finite loss {result.losses[0]:.4f}")
        check(bool((weights(result.model) - before).abs().max() > 0), "weights moved")
        if gpu:
            print(f"  peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB")
        del result

        for name, estimator in (("GRPO", "grpo"), ("PPO with the critic", "gae")):
            print(f"{3 if estimator == 'grpo' else 4}. {name} step(s) (learner {dtype} + gradient checkpointing, "
                  f"engine {'bfloat16' if gpu else 'float32'})")
            train = TrainConfig(
                model=str(model),
                loop=LoopConfig(output_dir=str(Path(tmp) / estimator), iterations=args.steps, prompts_per_iteration=8),
                search=TreeSearchConfig(strategy="best_of_n",
                                        best_of_n=BestOfNConfig(n=4, max_tokens=48, temperature=1.0)),
                algorithm=AlgorithmConfig(estimator=estimator, old_logprobs="learner"),
                value=ValueConfig(critic=CriticConfig(enabled=estimator == "gae",
                                                      target="gae" if estimator == "gae" else "tree")),
                learner=LearnerConfig(device=device, dtype=dtype, gradient_checkpointing=True, minibatches=2, lr=1e-4),
                engine=EngineConfig(dtype="bfloat16" if gpu else "float32"))
            trainer = SearchTrainer(train, problems, task.reward, extract=task.verifier.extract)
            before = weights(trainer.learner.policy)
            history = [trainer.step() for _ in range(args.steps)]
            last = history[-1]
            losses = [last["pg_loss"]] + ([last["value_loss"]] if "value_loss" in last else [])
            check(all(math.isfinite(x) for x in losses) and last["policy_skipped"] == 0.0,
                  f"finite losses {', '.join(f'{x:.4f}' for x in losses)}")
            check(bool((weights(trainer.learner.policy) - before).abs().max() > 0), "policy weights moved")
            gap, k3 = history[0]["engine_learner_logprob_gap"], history[0]["engine_learner_k3"]
            check(gap <= (BF16_MAX_GAP if gpu else 1e-3) and k3 <= BF16_MAX_K3,
                  f"engine-learner log-prob gap {gap:.2e} (max over tokens), k3 {k3:.2e}")
            print(f"  peak memory {last['peak_memory_mb']:,.0f} MiB ({'GPU' if gpu else 'process RSS'})")
            del trainer
    print("all checks passed" if not failures else f"{len(failures)} check(s) FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
