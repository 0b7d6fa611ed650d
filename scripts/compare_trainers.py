"""DPO from tree pairs, rejection-sampling SFT and GRPO from the same trees at equal generated tokens,
and the outcome reward model as a best-of-N reranker against majority vote (library: scripts/lab/comparison.py).

    nice -n 10 python scripts/compare_trainers.py --doc          # the measurement in docs/results.md
    python scripts/compare_trainers.py --doc rl_variants --reward_model false --output_dir runs/rl_variants \\
        --arms grpo grpo_flat tree treerl ppo reinforce_pp_baseline   # docs/results.md, the RL variants
    python scripts/compare_trainers.py --tiny --output_dir /tmp/c  # every stage at a tiny size

Writes <output_dir>/curves.csv, curves.png (pass@1 against cumulative generated tokens), reranking.csv,
reranking.png, summary.json, and every run's metrics and tree store under <output_dir>/runs/. With --doc
it also writes its section of docs/results.md and copies the plots, CSVs and summary to docs/img/results/
(docs/img/rl_variants/ with --doc rl_variants).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

from lab.comparison import ComparisonConfig, run_comparison
from lab.comparison_report import SECTIONS, markdown, section_body
from planner.logs import configure_logging
from rl.cli import ArgumentParser, add_dataclass_arguments, dataclass_from_args

REPO = Path(__file__).resolve().parents[1]
TINY = dict(seeds=[0], token_budget=2500, evals=1, prompts_per_iteration=4, simulations=2, eval_problems=16,
            eval_samples=1, rerank_sizes=[1, 2], rerank_seeds=[0], sft_minutes=0.3, progress=False)
"""The smoke-test size: every stage and artifact in a few minutes."""


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="every stage at the smoke-test size (TINY)")
    parser.add_argument("--doc", nargs="?", const="trainers", choices=["trainers", "rl_variants"],
                        help="write a section of docs/results.md and copy the artifacts to docs/img/: 'trainers' "
                             "(DPO, RS-SFT and GRPO; the default) or 'rl_variants' (the policy-gradient estimators)")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs too (default: warnings)")
    add_dataclass_arguments(parser, ComparisonConfig)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        defaults = dataclasses.replace(ComparisonConfig(), **TINY) if args.tiny else None
        config = dataclass_from_args(ComparisonConfig, args, defaults=defaults)
    except ValueError as error:
        parser.error(str(error))

    summary = run_comparison(config)
    print(markdown(summary))
    if args.doc:
        from benchdoc import machine_line, update_section

        section, folder = SECTIONS[args.doc]
        out, images = Path(config.output_dir), REPO / "docs" / "img" / folder
        images.mkdir(parents=True, exist_ok=True)
        names = [n for n in ("curves.png", "curves.csv", "reranking.png", "reranking.csv", "summary.json")
                 if (out / n).is_file()]
        for name in names:
            shutil.copy(out / name, images / name)
        command = ".venv/bin/python scripts/compare_trainers.py " + " ".join(
            sys.argv[1:] if argv is None else argv)
        body = section_body(summary, command, machine_line(), ", ".join(f"docs/img/{folder}/{n}" for n in names),
                            images=folder)
        update_section(section, body, doc=REPO / "docs" / "results.md",
                       header="# Results\n\nMeasured comparisons; each section names the command that wrote it.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
