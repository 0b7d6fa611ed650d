"""One GRPO iteration of this toolkit against TRL's GRPOTrainer, plus PPO (with the critic) and vLLM.

    .venv/bin/python scripts/bench_learner.py                  # everything, table into docs/benchmarks.md
    .venv/bin/python scripts/bench_learner.py --rounds 1 --no-vllm --no-doc

One iteration = sample G completions for each of P prompts, reward them, one optimisation step
(and, for this toolkit, push the new weights into the serving engine). Both sides get the same tiny
Llama (hidden 128, 4 layers, 4 heads, char tokenizer), the same chat-formatted prompts, G, P, max
tokens, learning rate, clip range, loss aggregation (token_mean == TRL "bnpo"), no KL (beta 0, no
reference model), float32 and one torch thread. TRL runs without vLLM and, to match this toolkit,
without its defaults of bf16 autocast and gradient checkpointing.

Each configuration runs in a fresh subprocess (so its peak resident memory is its own): warm-up
iterations, then timed ones. Configurations alternate in rounds (ours, TRL, ours-PPO, ... again),
and the table gives the median over all timed iterations of all rounds. Engine and trainer
construction are excluded from the iteration time; vLLM's start-up is reported on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchdoc import machine_line, update_section
from verifiers import Problem

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = {  # name -> what the row says
    "ours-grpo": "ours, GRPO, transformers backend",
    "trl-grpo": "TRL GRPOTrainer (transformers generate)",
    "ours-ppo": "ours, PPO (GAE + value critic), transformers backend",
    "ours-grpo-vllm": "ours, GRPO, vLLM backend (eager)",
}
SHORT = {"ours-grpo": "ours GRPO", "ours-ppo": "ours PPO",
         "trl-grpo": "TRL GRPO"}


# ----------------------------------------------------------------------------- shared workload


def reward_text(text: str) -> float:
    """The reward of both sides: the fraction of digits in the completion."""
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)


def questions(count: int = 64) -> list[str]:
    rng = random.Random(0)
    return [f"Q: {rng.randint(100, 999)}+{rng.randint(100, 999)}=? A:" for _ in range(count)]


class PeakRSS:
    """Peak resident memory of this process and its children (vLLM's engine core is one), sampled
    every 50 ms, and this process's own exact peak from getrusage; the larger of the two in MB."""

    def __init__(self) -> None:
        self._proc, self._peak, self._stop = psutil.Process(), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_rss(self) -> int:
        total = 0
        for p in [self._proc] + self._proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a child may exit between listing and reading
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._peak = max(self._peak, self._tree_rss())

    def peak_mb(self) -> float:
        self._stop.set()
        self._thread.join()
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KB on Linux
        return max(own, self._peak) / 2**20


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and its live children: vLLM's engine core runs in
    a child process, so its sampling work counts too."""
    total = time.process_time()
    for child_process in psutil.Process().children(recursive=True):
        try:
            times = child_process.cpu_times()
            total += times.user + times.system
        except Exception:  # noqa: BLE001 - a child may exit between listing and reading
            pass
    return total


# ----------------------------------------------------------------------------- ours


class PhaseTimer:
    """CPU time of this process per phase of our iteration, by wrapping the trainer's methods (no profiler
    overhead). CPU rather than wall time: other work on a shared machine inflates wall time, not CPU time.
    Phases may nest (the optimizer step calls the forward): each phase counts its own time only, its
    nested phases' time going to them, so the phases never count a second twice."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._stack: list[list[float]] = []  # per open phase: [start, time spent in nested phases]

    def wrap(self, owner, name: str, label) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            self._stack.append([time.process_time(), 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                start, nested = self._stack.pop()
                elapsed = time.process_time() - start
                key = label(*args, **kwargs) if callable(label) else label
                self.seconds[key] = self.seconds.get(key, 0.0) + elapsed - nested
                if self._stack:
                    self._stack[-1][1] += elapsed
        setattr(owner, name, timed)


def run_ours(args, name: str) -> dict:
    import torch

    import rl.forward as F
    import rl.trainer as T
    from planner.strategies import BestOfNConfig
    from rl.config import (AlgorithmConfig, CriticConfig, EngineConfig, LearnerConfig, LoopConfig, TrainConfig,
                           TreeSearchConfig, ValueConfig)
    from rl.losses import PolicyLossConfig

    ppo = name == "ours-ppo"
    problems = [Problem(id=f"bench/{i}", question=q, reference="", task="bench") for i, q in enumerate(questions())]
    total = args.warmup + args.iterations
    config = TrainConfig(
        model=str(args.model),
        loop=LoopConfig(output_dir=str(Path(args.workdir) / name), iterations=10_000, checkpoint_every=10_000,
                        prompts_per_iteration=args.prompts, seed=0, threads=1),
        engine=EngineConfig(backend="vllm" if "vllm" in name else "hf"),
        search=TreeSearchConfig(strategy="best_of_n",
                                best_of_n=BestOfNConfig(n=args.generations, max_tokens=args.max_tokens,
                                                        temperature=1.0)),
        algorithm=AlgorithmConfig(estimator="gae" if ppo else "grpo",
                                  loss=PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.2, aggregation="token_mean",
                                                        kl_coef=0.0)),
        learner=LearnerConfig(lr=args.lr, epochs=1, minibatches=1, max_grad_norm=1.0),
        value=ValueConfig(critic=CriticConfig(enabled=ppo, target="gae")))
    start = time.perf_counter()
    trainer = T.SearchTrainer(config, problems, lambda text, problem: reward_text(text))
    startup = time.perf_counter() - start
    phases = PhaseTimer()
    phases.wrap(trainer, "grow_trees", "search (generate + reward)")
    learner = trainer.learner
    for forward in ("token_logprobs", "packed_token_logprobs"):  # row-wise or tree-packed (the default)
        phases.wrap(F, forward, lambda *a, **k: "learner forward (with grad)" if torch.is_grad_enabled()
                    else "old-logprob recompute (no grad)")
    phases.wrap(learner, "_step", lambda module, *a, **k: "critic loss + backward + AdamW"
                if module is learner.critic_forward else "policy loss + backward + clip + AdamW")
    if learner.critic is not None:
        phases.wrap(learner.critic, "token_values", "critic forward")
        phases.wrap(learner.critic, "packed_values", "critic forward")
    phases.wrap(trainer.engine, "load_weights", "weight push (load_weights)")
    phases.wrap(trainer.logger, "log", "metrics logging")
    times, cpu_times, own_cpu_times, lengths = [], [], [], []
    profile_text = None
    for i in range(total):
        if i == args.warmup:
            phases.seconds.clear()
        if args.profile and i == total - 1:
            import cProfile
            import io
            import pstats
            profiler = cProfile.Profile()
            profiler.enable()
        start, cpu_start, own_start = time.perf_counter(), tree_cpu(), time.process_time()
        metrics = trainer.step()
        seconds, cpu_seconds = time.perf_counter() - start, tree_cpu() - cpu_start
        own_seconds = time.process_time() - own_start
        if args.profile and i == total - 1:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            profile_text = out.getvalue()
        if i >= args.warmup:
            times.append(seconds)
            cpu_times.append(cpu_seconds)
            own_cpu_times.append(own_seconds)
            lengths.append(metrics["response_length"])
    timed = len(times) - (1 if args.profile else 0)  # the profiled iteration is slowed by cProfile
    result = {"times": times[:timed] if timed else times, "cpu_times": cpu_times[:timed] if timed else cpu_times,
              "startup_s": startup,
              "response_length": statistics.mean(lengths),
              # phase means and the "other" remainder over the same iterations, on the same clock (this
              # process's CPU time, which the phase timers read), so they add up to the mean iteration
              "phases": {k: v / len(times) for k, v in phases.seconds.items()},
              "own_cpu_mean": statistics.mean(own_cpu_times), "profile": profile_text}
    trainer.engine.close()
    return result


# ----------------------------------------------------------------------------- TRL


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    total = args.warmup + args.iterations
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in questions()])

    def digit_reward(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [reward_text(t) for t in texts]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.cpu_times, self._start = [], [], None

        def on_step_begin(self, *a, **k):
            self._start = (time.perf_counter(), time.process_time())

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._start[0])
            self.cpu_times.append(time.process_time() - self._start[1])

    config = GRPOConfig(
        output_dir=str(Path(args.workdir) / "trl"), use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False, per_device_train_batch_size=args.prompts * args.generations,
        gradient_accumulation_steps=1, num_generations=args.generations, max_completion_length=args.max_tokens,
        temperature=1.0, top_p=1.0, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, num_iterations=1, loss_type="bnpo", scale_rewards="group",
        max_steps=total, report_to=[], logging_strategy="no", save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, seed=0, log_completions=False)
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=digit_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer])
    startup = time.perf_counter() - start
    generate_and_score, generation_times = trainer._generate_and_score_completions, []

    def timed_generation(*a, **k):  # TRL's generation, rewards and advantages (no old-logprob pass here)
        begin = time.process_time()
        try:
            return generate_and_score(*a, **k)
        finally:
            generation_times.append(time.process_time() - begin)
    trainer._generate_and_score_completions = timed_generation
    torch.set_num_threads(1)
    trainer.train()
    generation = statistics.mean(generation_times[args.warmup:])
    cpu_times = timer.cpu_times[args.warmup:]
    return {"times": timer.times[args.warmup:], "cpu_times": cpu_times, "startup_s": startup,
            "own_cpu_mean": statistics.mean(cpu_times), "phases": {
        "generate + reward (TRL _generate_and_score_completions)": generation,
        "forward + backward + AdamW (TRL training step)": statistics.mean(cpu_times) - generation}}


# ----------------------------------------------------------------------------- driver


def child(args) -> None:
    import torch
    torch.set_num_threads(1)
    meter = PeakRSS()
    result = run_trl(args) if args.child == "trl-grpo" else run_ours(args, args.child)
    result["peak_rss_mb"] = meter.peak_mb()
    print("RESULT " + json.dumps(result), flush=True)


def launch(args, name: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error", VLLM_LOGGING_LEVEL="WARNING")
    command = [sys.executable, __file__, "--child", name, "--model", str(args.model), "--workdir", str(args.workdir),
               "--prompts", str(args.prompts), "--generations", str(args.generations),
               "--max-tokens", str(args.max_tokens), "--lr", str(args.lr), "--warmup", str(args.warmup),
               "--iterations", str(args.iterations)] + ([] if args.profile and name == "ours-grpo" else ["--no-profile"])
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-6000:])
        raise RuntimeError(f"configuration {name} failed (exit {done.returncode})")
    result = json.loads(lines[-1][len("RESULT "):])
    print(f"  {name}: wall {', '.join(f'{t:.2f}' for t in result['times'])} s/iteration, "
          f"CPU {', '.join(f'{t:.2f}' for t in result['cpu_times'])} s, "
          f"peak RSS {result['peak_rss_mb']:.0f} MB, process {time.perf_counter() - start:.0f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8, help="P, prompts per iteration")
    parser.add_argument("--generations", type=int, default=8, help="G, completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=64, help="most tokens per completion")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per process")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations per process")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the transformers configurations")
    parser.add_argument("--no-vllm", action="store_true", help="leave out the vLLM configuration")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="no cProfile of our last GRPO iteration")
    parser.add_argument("--no-doc", action="store_true", help="print the table only; leave docs/benchmarks.md")
    parser.add_argument("--child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from planner.policy.local_models import build_tiny_llama

    began = time.perf_counter()
    order = ["ours-grpo", "trl-grpo", "ours-ppo"]
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-learner-") as tmp:
        args.workdir = tmp
        args.model = build_tiny_llama(Path(tmp) / "tiny", hidden_size=128, num_layers=4, num_heads=4)
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for name in order:
                profile, args.profile = args.profile, args.profile and r == 0
                results.setdefault(name, []).append(launch(args, name))
                args.profile = profile
        if not args.no_vllm:
            results["ours-grpo-vllm"] = [launch(args, "ours-grpo-vllm")]
    elapsed = time.perf_counter() - began

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_total = children.ru_utime + children.ru_stime  # every process the benchmark started, vLLM's included

    def summary(name):
        """(median wall s, median CPU s, peak RSS MB, timed iterations) of a configuration."""
        runs = results[name]
        times = [t for run in runs for t in run["times"]]
        cpu = [t for run in runs for t in run["cpu_times"]]
        return statistics.median(times), statistics.median(cpu), max(run["peak_rss_mb"] for run in runs), len(times)

    trl_s, trl_cpu, trl_mb, _ = summary("trl-grpo")
    ours_s, ours_cpu, ours_mb, _ = summary("ours-grpo")
    table = ["| configuration | median wall s/iteration | median CPU s/iteration | peak RSS MB | wall vs TRL "
             "| CPU vs TRL | memory vs TRL | timed iterations |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in results:
        s, cpu, mb, count = summary(name)
        table.append(f"| {CONFIGS[name]} | {s:.2f} | {cpu:.2f} | {mb:,.0f} | {s / trl_s:.2f}x | "
                     f"{cpu / trl_cpu:.2f}x | {mb / trl_mb:.2f}x | {count} |")
    load = os.getloadavg()[1]
    lines = [f"Command: `.venv/bin/python scripts/bench_learner.py` (this run: {elapsed / 60:.1f} min wall, "
             f"{cpu_total / 60:.1f} min CPU over all its processes; load average {load:.1f} on {os.cpu_count()} cores "
             "at the end, i.e. a busy shared machine).", "",
             machine_line(), "",
             f"Workload: P={args.prompts} prompts x G={args.generations} completions, at most {args.max_tokens} "
             f"tokens, lr {args.lr:g}, clip 0.2, token-mean loss (TRL \"bnpo\"), beta 0 (no reference model), "
             "float32 (TRL's bf16 and gradient checkpointing off), 1 torch thread; tiny Llama (hidden 128, "
             "4 layers, 4 heads, char tokenizer, random init), reward = fraction of digits in the completion. "
             f"Median over {args.rounds} alternating fresh processes x {args.iterations} timed iterations "
             f"(after {args.warmup} warm-up). CPU time is user + system of the process (and of vLLM's engine-core "
             "process): on a shared machine it is the steadier measure, and with one thread it is about what wall "
             "time would be on an idle machine (vLLM's two processes can overlap a little on two cores). "
             "Peak RSS is the largest of a configuration's processes (its whole process tree for vLLM, whose "
             "engine core is a second process holding a 1 GiB KV cache). The vLLM rows share one process and "
             "engine (the fixes are applied after the plain iterations).", "",
             *table, ""]
    ppo_s, ppo_cpu = summary("ours-ppo")[:2]
    lines.append(f"- PPO's critic (a second model: forward twice, backward, AdamW) costs {ppo_cpu - ours_cpu:+.2f} CPU s "
                 f"per iteration over our GRPO ({ppo_cpu / ours_cpu:.2f}x CPU, {ppo_s / ours_s:.2f}x wall).")
    if "ours-grpo-vllm" in results:
        lines.append(f"- vLLM engine start (excluded above): {results['ours-grpo-vllm'][0]['startup_s']:.0f} s wall; "
                     f"trainer start on transformers: {statistics.median(r['startup_s'] for r in results['ours-grpo']):.1f} s, "
                     f"TRL's: {statistics.median(r['startup_s'] for r in results['trl-grpo']):.1f} s.")
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    lines.append(f"- Target, GRPO at most 0.8x TRL's time: {verdict(ours_cpu <= 0.8 * trl_cpu)} in CPU time "
                 f"({ours_cpu / trl_cpu:.2f}x), {verdict(ours_s <= 0.8 * trl_s)} in wall time ({ours_s / trl_s:.2f}x). "
                 f"Peak memory not above TRL's: {verdict(ours_mb <= trl_mb)} ({ours_mb:,.0f} vs {trl_mb:,.0f} MB). "
                 f"Whole benchmark under 10 min: {verdict(elapsed < 600)} in wall time ({elapsed / 60:.1f} min), "
                 f"{verdict(cpu_total < 2 * 600)} in CPU time on 2 cores ({cpu_total / 60:.1f} CPU min).")
    columns = [n for n in ("ours-grpo", "ours-ppo", "trl-grpo") if n in results]
    phase_means = {n: {} for n in columns}
    for n in columns:
        for run in results[n]:
            for key, value in run["phases"].items():
                phase_means[n][key] = phase_means[n].get(key, 0.0) + value / len(results[n])
    keys = list(dict.fromkeys(k for n in columns for k in sorted(phase_means[n], key=lambda k: -phase_means[n][k])))
    own_means = {n: statistics.mean(run["own_cpu_mean"] for run in results[n]) for n in columns}
    lines += ["", "Where the time goes (this process's CPU s per timed iteration, mean over the timed iterations "
              "and processes; timers wrap the trainers' methods; \"other\" is the mean iteration's CPU time minus "
              "the phases, on the same clock and iterations: batching, advantages, bookkeeping; vLLM's engine-core "
              "process is not in this table):", "",
              "| phase | " + " | ".join(SHORT[n] for n in columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(f"{phase_means[n][key]:.2f}" if key in phase_means[n] else ""
                                                for n in columns) + " |")
    lines.append("| other | " + " | ".join(f"{own_means[n] - sum(phase_means[n].values()):.2f}" for n in columns) + " |")
    lines.append("| total (mean iteration) | " + " | ".join(f"{own_means[n]:.2f}" for n in columns) + " |")
    body = "\n".join(lines)
    print(body)
    profile = results["ours-grpo"][0].get("profile")
    if profile:
        print("\ncProfile of our last GRPO iteration (round 1), top by cumulative time:\n" + profile)
    if not args.no_doc:
        print(f"written to {update_section('Learner', body)}")


if __name__ == "__main__":
    main()
