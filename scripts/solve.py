"""Solve a task's problems (or one --problem) with a search strategy; print or write JSONL results.

    python scripts/solve.py --model DIR --task gsm8k --limit 5 --strategy beam --budget 4000 \
        --set num_beams=8 --set beam_width=4 --out results.jsonl

Each output line: id, question, reference, answer, reward (when the task has a reference), text,
and the search's compute (generated / prompt / cached tokens, calls, FLOPs). Everything here can be
done from Python with `planner.solve`.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from planner.budget import Budget
from planner.logs import configure_logging
from task_options import add_data_arguments, resolve_model_option, task_options

SHORT_OPTIONS = ("task", "problem", "task_path", "split", "limit", "model", "backend", "strategy", "budget", "set",
                 "out")
"""The options `--help` shows; `--help-all` shows every one."""



def build_parser() -> argparse.ArgumentParser:
    from planner.strategies import STRATEGIES, options_help
    from rl.cli import ArgumentParser, at_least, output_dir, output_file

    parser = ArgumentParser(description=__doc__.split("\n\n")[0], epilog=options_help(), short_options=SHORT_OPTIONS)
    parser.add_argument("--model", required=True, help="policy model: a save_pretrained folder, or a name of "
                                                        "planner.policy.local_models.NAMED_MODELS (\"smollm2\", "
                                                        "\"qwen2.5-coder-0.5b\")")
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf", help="policy backend (default: hf)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="policy weights' dtype (default: float32)")
    data = parser.add_argument_group("data")
    source = data.add_mutually_exclusive_group(required=True)
    add_data_arguments(data, split="test", task_group=source)
    source.add_argument("--problem", help="one problem text instead of a task")
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="mcts",
                        help="search strategy; each samples at its own temperature, 0.8 unless --set temperature=T "
                             "(default: mcts)")
    parser.add_argument("--budget", type=at_least(1), help="most generated tokens per problem (default: no limit)")
    parser.add_argument("--budget-flops", type=at_least(1, float),
                        help="most estimated FLOPs per problem (default: no limit)")
    parser.add_argument("--scorer", help="a PRM / value-critic folder (AutoModelForTokenClassification, num_labels=1); "
                                         "default: the Monte-Carlo majority-agreement scorer for beam, dvts, mcts")
    parser.add_argument("--squash", choices=["sigmoid", "clamp"], default="sigmoid",
                        help="how the --scorer head's output maps to [0, 1] (default: sigmoid)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a strategy option (see below); VALUE is a Python literal or a plain string")
    parser.add_argument("--seed", type=int, default=0, help="search seed; problem i uses seed + i (default: 0)")
    parser.add_argument("--replicas", type=at_least(1), default=1,
                        help="engine replicas: 1 = one engine in this process; N > 1 = an engine pool of N Ray actors "
                             "(a local Ray instance, or the cluster at $RAY_ADDRESS), one CPU (GPU when the cluster "
                             "has them) each; use it with --batch_size, since one search runs on one replica "
                             "(docs/scale-out.md) (default: 1)")
    parser.add_argument("--batch_size", type=at_least(1), default=1,
                        help="search this many problems together (planner.solve_batch: their engine calls merged, "
                             "so a pool's replicas run in parallel); samples then differ from one-by-one (default: 1)")
    parser.add_argument("--no-chat", action="store_true", help="do not wrap problems in the chat template")
    parser.add_argument("--system", help="system prompt for the chat template")
    parser.add_argument("--out", type=output_file, help="write JSONL here (default: print to stdout)")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                               "bars too (default: warnings and errors only)")
    parser.add_argument("--trees", type=output_dir, help="save each search tree as JSON in this folder")
    return parser


def parse_options(pairs: list[str], parser: argparse.ArgumentParser) -> dict:
    options = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            parser.error(f"--set expects NAME=VALUE; got {pair!r}")
        try:
            options[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[name] = text
    return options


def _solutions(problems, policy, args, scorer, budget, options):
    """(index, problem, solution) in order: one by one (`solve`), or --batch_size at a time (`solve_batch`)."""
    from planner.solve import solve, solve_batch

    settings = dict(chat=not args.no_chat, system=args.system, **options)
    for start in range(0, len(problems), args.batch_size):
        chunk = problems[start:start + args.batch_size]
        solutions = ([solve(chunk[0], policy, args.strategy, scorer, budget, seed=args.seed + start, **settings)]
                     if len(chunk) == 1 else
                     solve_batch(chunk, policy, args.strategy, scorer, budget, seed=args.seed + start, **settings))
        yield from ((start + k, problem, solution) for k, (problem, solution) in enumerate(zip(chunk, solutions)))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if args.scorer and not (Path(args.scorer) / "config.json").is_file():
        parser.error(f"--scorer {args.scorer!r}: no model folder there (expected a config.json)")
    if args.task_path and not Path(args.task_path).exists() and Path(args.task_path).suffix:
        parser.error(f"--task_path {args.task_path!r}: no such file")
    options = parse_options(args.set, parser)

    from planner.policy import load_policy
    from planner.scorers import ModelScorer
    from planner.solve import check_prompt_fits, prompt_ids_for
    from planner.strategies import make_config

    try:
        make_config(args.strategy, **options)  # fail on a bad option before loading anything
        budget = (Budget(generated_tokens=args.budget, flops=args.budget_flops)
                  if args.budget is not None or args.budget_flops is not None else None)
        if args.task:
            from verifiers import load_task

            task = load_task(args.task, args.task_path, split=args.split, **task_options(args))
            problems, verifier = task.problems[:args.limit], task.verifier
            options.setdefault("extract", verifier.extract)
            options.setdefault("equivalent", verifier.equivalent)
        else:
            task, problems = None, [args.problem]
        args.model = resolve_model_option(args.model)  # a name such as "smollm2", or a save_pretrained folder
    except (ValueError, FileNotFoundError, TypeError, ImportError) as error:
        parser.error(str(error))

    policy = load_policy(args.model, backend=args.backend, dtype=args.dtype, seed=args.seed, replicas=args.replicas)
    try:  # every prompt fits the model's context, before any search
        for i, problem in enumerate(problems):
            check_prompt_fits(prompt_ids_for(problem, policy, chat=not args.no_chat, system=args.system), policy,
                              f"problem {i}'s prompt" if task is not None else "the --problem prompt")
    except ValueError as error:
        policy.close()
        parser.error(str(error))
    scorer = ModelScorer(args.scorer, squash=args.squash) if args.scorer else None
    out = open(args.out, "w") if args.out else sys.stdout
    try:
        for i, problem, solution in _solutions(problems, policy, args, scorer, budget, options):
            row = {"id": getattr(problem, "id", str(i)), "question": getattr(problem, "question", problem),
                   **solution.to_dict()}
            if task is not None:
                row["reference"] = problem.reference if isinstance(problem.reference, (str, int, float)) else None
                row["reward"] = task.reward(solution.text, problem)
            if args.trees:
                Path(args.trees).mkdir(parents=True, exist_ok=True)
                solution.tree.save(Path(args.trees) / f"{i:05d}.json")
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()
    finally:
        if out is not sys.stdout:
            out.close()
        policy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
