"""Grade values the way search uses them, on the embedded arithmetic task's process oracle.

    python scripts/value_eval.py --policy runs/demo/rl/checkpoint/policy --critic runs/demo/rl/checkpoint/critic \
        --scorers random confidence mc2 mc4 critic --problems 256 --seeds 0 1 2 --out runs/value_eval

For each seed, sibling sets and complete samples are drawn from the policy on held-out problems
(`planner.value_eval.collect_cases`) and every scorer is graded on the same cases: sibling-ranking
accuracy, step AUC within depths, reranking of complete samples against majority vote and a random
pick, calibration (ECE) and FLOPs per scored prefix, each accuracy with its 95% bootstrap interval
over problems. Writes `values.csv`, `values.json` and `sibling_accuracy.png` to --out.

Scorers: random; confidence and confidence_min (the policy's own step log-probabilities, their mean
or their least, free); mcK (Monte-Carlo majority agreement of K rollouts, no reference); critic (a
ValueCritic folder, --critic); prm (a process reward model folder of rl/prm.py, --prm); verifier (a
generative verifier folder of scripts/lab/verifier_lm.py, --verifier).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.value_report import write_value_rows
from planner.logs import configure_logging
from planner.value_eval import grade_scorers
from rl.cli import ArgumentParser, at_least, model_dir, output_dir
from verifiers.arithmetic import STEP_DELIMITER, held_out_task, step_value

SCORERS = ("random", "confidence", "confidence_min", "mcK", "critic", "prm", "verifier")
"""The scorers --scorers can name ("mcK": K >= 1 rollouts, e.g. mc4)."""
FOLDER_OPTION = {"critic": "--critic", "prm": "--prm", "verifier": "--verifier"}
"""Scorers that load a folder, and the option that gives it."""


def parse(argv):
    """The options, every one checked before any model loads: one clear error otherwise."""

    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--policy", required=True, type=model_dir, help="the policy folder whose steps are graded")
    parser.add_argument("--critic", type=model_dir, help="a ValueCritic folder (for the 'critic' scorer)")
    parser.add_argument("--prm", type=model_dir,
                        help="a process reward model folder (rl/prm.py's save_pretrained) for the 'prm' scorer")
    parser.add_argument("--verifier", type=model_dir,
                        help="a generative verifier folder (scripts/lab/verifier_lm.py) for the 'verifier' scorer")
    parser.add_argument("--scorers", nargs="+", default=["random", "confidence", "mc4"],
                        help="which to grade: random, confidence, confidence_min, mcK (K rollouts), critic, prm, "
                             "verifier")
    parser.add_argument("--problems", type=at_least(1), default=256, help="held-out arithmetic problems (default 256)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="sampling seeds (default: 0)")
    parser.add_argument("--candidates", type=at_least(2), default=4, help="siblings per expansion (default 4)")
    parser.add_argument("--samples", type=at_least(1), default=8,
                        help="complete samples per problem to rerank (default 8)")
    parser.add_argument("--backend", choices=["hf", "vllm"], default="vllm", help="the policy's engine")
    parser.add_argument("--out", required=True, type=output_dir, help="output folder")
    parser.add_argument("--verbose", action="store_true", help="the engines' logs too")
    args = parser.parse_args(argv)
    for name in args.scorers:
        if name not in SCORERS and not (name.startswith("mc") and name[2:].isdigit() and int(name[2:]) >= 1):
            parser.error(f"argument --scorers: unknown scorer {name!r}; choose from {', '.join(SCORERS)}")
        if name in FOLDER_OPTION and getattr(args, name) is None:
            parser.error(f"argument --scorers: the {name!r} scorer needs {FOLDER_OPTION[name]} FOLDER")
        marker = {"prm": "prm.json", "verifier": "scorer.json"}.get(name)
        if marker and not (Path(getattr(args, name)) / marker).is_file():
            parser.error(f"argument {FOLDER_OPTION[name]}: {getattr(args, name)!r} has no {marker}: pass a folder "
                         f"that {'rl/prm.py' if name == 'prm' else 'scripts/lab/verifier_lm.py'} saved")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"argument --seeds: the seeds must be distinct; got {args.seeds}")
    return args


def make_scorer(name: str, args, policy, task):
    """The scorer `name` (checked by `parse`)."""
    from planner.monte_carlo import MonteCarloScorer
    from planner.scorers import ConfidenceScorer, RandomScorer

    if name == "random":
        return RandomScorer()
    if name in ("confidence", "confidence_min"):
        return ConfidenceScorer(reduce="min" if name == "confidence_min" else "mean")
    if name.startswith("mc") and name[2:].isdigit():
        return MonteCarloScorer(policy, rollouts=int(name[2:]), max_tokens=64, temperature=1.0,
                                extract=task.verifier.extract, equivalent=task.verifier.equivalent)
    if name == "critic":
        from rl.critic import ValueCritic
        return ValueCritic.from_pretrained(args.critic)
    if name == "prm":
        from rl.prm import ProcessRewardModel
        return ProcessRewardModel.load(args.prm)
    if name == "verifier":
        from planner.prm_scorers import load_scorer
        return load_scorer(args.verifier, decode=policy.decode)
    raise ValueError(f"unknown scorer {name!r}: one of {', '.join(SCORERS)} (parse checks the names)")


def main(argv=None) -> int:
    args = parse(argv)
    configure_logging(args.verbose)

    from planner.policy import load_policy

    task = held_out_task(args.problems)
    problems = task.problems
    policy = load_policy(args.policy, backend=args.backend, seed=0)
    scorers = {name: make_scorer(name, args, policy, task) for name in args.scorers}
    rows = grade_scorers(policy, problems, scorers, task, step_value, seeds=args.seeds, progress=True,
                         candidates=args.candidates, samples=args.samples, step_delimiter=STEP_DELIMITER)
    policy.close()
    out = Path(args.out)
    write_value_rows(rows, out)
    for row in rows:
        low, high = row["sibling_accuracy_interval"] or (float("nan"), float("nan"))
        print(f"{row['scorer']:>10} seed {row['seed']}: sibling accuracy {row['sibling_accuracy']:.3f} [{low:.3f}, "
              f"{high:.3f}], step AUC {row['step_auc']:.3f}, rerank {row['rerank_accuracy']:.3f} "
              f"(majority {row['majority_accuracy']:.3f}), ECE {row['ece']:.3f}, "
              f"FLOPs/prefix {row['flops_per_prefix']:.2e}")
    print(f"wrote {out / 'values.csv'}, values.json and sibling_accuracy.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
