"""Grade values the way search uses them, on the embedded arithmetic task's process oracle.

    python scripts/value_eval.py --policy runs/demo/rl/checkpoint/policy --critic runs/demo/rl/checkpoint/critic \
        --scorers random confidence mc2 mc4 critic --problems 256 --seeds 0 1 2 --out runs/value_eval

For each seed, sibling sets and complete samples are drawn from the policy on held-out problems
(`planner.value_eval.collect_cases`) and every scorer is graded on the same cases: sibling-ranking
accuracy, step AUC within depths, reranking of complete samples against majority vote and a random
pick, calibration (ECE) and FLOPs per scored prefix, each accuracy with its 95% bootstrap interval
over problems. Writes `values.csv`, `values.json` and `sibling_accuracy.png` to --out.

Scorers: random; confidence (the policy's own step log-probabilities, free); mcK (Monte-Carlo
majority agreement of K rollouts, no reference); critic (a ValueCritic folder, --critic); prm (a
ModelScorer folder with a sigmoid head, --prm).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

METRICS = ("sibling_accuracy", "step_auc", "rerank_accuracy", "majority_accuracy", "random_pick_accuracy")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, help="the policy folder whose steps are graded")
    parser.add_argument("--critic", help="a ValueCritic folder (for the 'critic' scorer)")
    parser.add_argument("--prm", help="a process reward model folder (for the 'prm' scorer: sigmoid head)")
    parser.add_argument("--scorers", nargs="+", default=["random", "confidence", "mc4"],
                        help="which to grade: random, confidence, mcK (K rollouts), critic, prm")
    parser.add_argument("--problems", type=int, default=256, help="held-out arithmetic problems (default 256)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="sampling seeds (default: 0)")
    parser.add_argument("--candidates", type=int, default=4, help="siblings per expansion (default 4)")
    parser.add_argument("--samples", type=int, default=8, help="complete samples per problem to rerank (default 8)")
    parser.add_argument("--backend", choices=["hf", "vllm"], default="vllm", help="the policy's engine")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--verbose", action="store_true", help="the engines' logs too")
    return parser.parse_args(argv)


def make_scorer(name: str, args, policy, task):
    from planner.monte_carlo import MonteCarloScorer
    from planner.scorers import ConfidenceScorer, ModelScorer, RandomScorer

    if name == "random":
        return RandomScorer()
    if name == "confidence":
        return ConfidenceScorer()
    if name.startswith("mc") and name[2:].isdigit():
        return MonteCarloScorer(policy, rollouts=int(name[2:]), max_tokens=64, temperature=1.0,
                                extract=task.verifier.extract, equivalent=task.verifier.equivalent)
    if name == "critic":
        from rl.critic import ValueCritic
        if not args.critic:
            raise SystemExit("the 'critic' scorer needs --critic FOLDER")
        return ValueCritic.from_pretrained(args.critic)
    if name == "prm":
        if not args.prm:
            raise SystemExit("the 'prm' scorer needs --prm FOLDER")
        return ModelScorer(args.prm, squash="sigmoid")
    raise SystemExit(f"unknown scorer {name!r}: one of random, confidence, mcK, critic, prm")


def main(argv=None) -> int:
    args = parse(argv)
    from planner.logs import configure_logging
    configure_logging(args.verbose)
    from tqdm import tqdm

    from planner.policy import load_policy
    from planner.value_eval import collect_cases, grade
    from verifiers.arithmetic import STEP_DELIMITER, load_arithmetic, step_value

    task = load_arithmetic(split="test")
    if args.problems > len(task.problems):
        from verifiers.arithmetic import SPLITS, arithmetic_task
        task.problems = arithmetic_task(args.problems, seed=SPLITS["test"][1])
    problems = task.problems[:args.problems]
    policy = load_policy(args.policy, backend=args.backend, seed=0)
    scorers = {name: make_scorer(name, args, policy, task) for name in args.scorers}
    rows = []
    for seed in tqdm(args.seeds, desc="seeds"):
        cases = collect_cases(policy, problems, step_value, task.reward, task.verifier.extract,
                              candidates=args.candidates, samples=args.samples, step_delimiter=STEP_DELIMITER,
                              seed=seed)
        for name, scorer in scorers.items():
            report = grade(scorer, cases, equivalent=task.verifier.equivalent)
            rows.append({"scorer": name, "seed": seed, **report})
    policy.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "values.json").write_text(json.dumps(rows, indent=1) + "\n")
    columns = ["scorer", "seed", "problems", "sibling_sets", "mixed_pairs", *METRICS, "ece", "flops_per_prefix"]
    with open(out / "values.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns + [f"{m}_low" for m in METRICS] + [f"{m}_high" for m in METRICS])
        writer.writeheader()
        for row in rows:
            intervals = {f"{m}_{side}": (row[f"{m}_interval"] or [None, None])[k]
                         for m in METRICS for k, side in enumerate(("low", "high"))}
            writer.writerow({**{c: row[c] for c in columns}, **intervals})
    plot(rows, out / "sibling_accuracy.png")
    for row in rows:
        low, high = row["sibling_accuracy_interval"] or (float("nan"), float("nan"))
        print(f"{row['scorer']:>10} seed {row['seed']}: sibling accuracy {row['sibling_accuracy']:.3f} [{low:.3f}, "
              f"{high:.3f}], step AUC {row['step_auc']:.3f}, rerank {row['rerank_accuracy']:.3f} "
              f"(majority {row['majority_accuracy']:.3f}), ECE {row['ece']:.3f}, "
              f"FLOPs/prefix {row['flops_per_prefix']:.2e}")
    print(f"wrote {out / 'values.csv'}, values.json and sibling_accuracy.png")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """Sibling-ranking accuracy per scorer (seed means) with the seeds' 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["scorer"] for r in rows))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for k, name in enumerate(names):
        mine = [r for r in rows if r["scorer"] == name and r["sibling_accuracy"] is not None]
        for j, r in enumerate(mine):
            low, high = r["sibling_accuracy_interval"]
            x = k + (j - (len(mine) - 1) / 2) * 0.12
            ax.errorbar(x, r["sibling_accuracy"], yerr=[[r["sibling_accuracy"] - low], [high - r["sibling_accuracy"]]],
                        fmt="o", color=f"C{k}", capsize=3)
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("sibling-ranking accuracy (95% interval)")
    ax.set_ylim(0.3, 1.02)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
