"""Combine compute-scaling runs (`scripts/scaling.py --out` folders) into one set of outputs.

    python scripts/combine_scaling.py --runs runs/bon runs/forcing runs/beam_0 runs/beam_64 --out runs/gsm8k

A run too long for one command is split by strategy and by problem slice (`--offset/--limit`).
Here the rows of one strategy, size and seed from consecutive slices become one row over all their
problems (totals added, each problem's index shifted by its slice's offset, read from the run's
summary.json), and different strategies are stacked; then results.csv, problems.csv, summary.json
(accuracies with their 95% intervals over all the problems) and the two plots are written as
`scripts/scaling.py` writes them (`planner.scaling_report.write_outputs`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from planner.scaling_report import curve, read_results, write_outputs

TOTALS = ("problems", "generated_tokens", "prompt_tokens", "cached_prompt_tokens", "flops", "policy_calls",
          "scorer_calls", "wall_seconds")


def combine(folders: list[Path], rename: dict[str, str] | None = None) -> list[dict]:
    """The rows of every run, rows of one (strategy, size, seed) joined across problem slices; `rename`
    maps a curve's name to the one shown (e.g. best_of_n run with --final weighted -> best_of_n_weighted),
    in every run ("OLD") or in the runs whose folder has that name ("FOLDER/OLD": two runs of one strategy
    under different scorers become two curves)."""
    rename = rename or {}

    joined: dict[tuple, dict] = {}
    for folder in folders:
        offset = json.loads((folder / "summary.json").read_text()).get("config", {}).get("offset", 0)
        for row in read_results(folder):
            row["strategy"] = rename.get(f"{folder.name}/{row['strategy']}", rename.get(row["strategy"], row["strategy"]))
            outcomes = [{**o, "strategy": row["strategy"], "problem": int(o["problem"]) + offset}
                        for o in row["outcomes"]]
            key = (row["strategy"], row["size"], row["seed"])
            if key not in joined:
                joined[key] = {**row, "outcomes": outcomes, "reward_sum": row["mean_reward"] * row["problems"]}
                continue
            into = joined[key]
            seen = {o["problem"] for o in into["outcomes"]} & {o["problem"] for o in outcomes}
            if seen:
                raise ValueError(f"{folder} repeats problems {sorted(seen)[:5]} of {key}: its slice overlaps another")
            into["outcomes"] += outcomes
            into["reward_sum"] += row["mean_reward"] * row["problems"]
            for column in TOTALS:
                into[column] += row[column]
    rows = []
    for row in joined.values():
        n = row["problems"]
        row.update(accuracy=sum(int(o["solved"]) for o in row["outcomes"]) / n, mean_reward=row.pop("reward_sum") / n,
                   generated_tokens_per_problem=row["generated_tokens"] / n, flops_per_problem=row["flops"] / n)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    from rl.cli import ArgumentParser, output_dir

    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, type=Path, help="scripts/scaling.py output folders")
    parser.add_argument("--out", required=True, type=output_dir, help="folder for the combined outputs")
    parser.add_argument("--rename", nargs="*", default=[], metavar="OLD=NEW",
                        help="show curve OLD as NEW, e.g. best_of_n=best_of_n_weighted; FOLDER/OLD=NEW renames it "
                             "only in the runs whose folder is named FOLDER, e.g. search_confidence/beam=beam_confidence")
    parser.add_argument("--band", choices=["interval", "minmax", "std"], default="interval",
                        help="band in the plots (default: the 95%% bootstrap interval over problems)")
    args = parser.parse_args(argv)
    rename = dict(item.split("=", 1) for item in args.rename if "=" in item)
    if len(rename) != len(args.rename):
        parser.error(f"argument --rename: expects OLD=NEW pairs; got {args.rename}")
    missing = [str(f) for f in args.runs if not ((f / "results.csv").is_file() and (f / "summary.json").is_file())]
    if missing:
        parser.error(f"argument --runs: not scaling outputs (no results.csv and summary.json): {missing}")

    try:
        rows = combine(args.runs, rename)
        write_outputs(rows, Path(args.out), band=args.band)
    except ValueError as error:
        parser.error(str(error))
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        for p in curve(rows, strategy):
            print(f"{strategy:>20} {p['size']:>6} {p['accuracy_mean']:.3f} ({p['accuracy_low']:.3f}-"
                  f"{p['accuracy_high']:.3f}) {p['problems']} problems x {p['seeds']} seeds "
                  f"{p['generated_tokens_per_problem_mean']:.0f} tokens {p['flops_per_problem_mean']:.3g} FLOPs")
    print(f"wrote {Path(args.out) / 'results.csv'}, problems.csv, summary.json and the PNGs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
