"""The value study (scripts/lab/study.py): values graded against the process oracle, search against best-of-N at
equal FLOPs, and budget forcing with and without self-correction traces, on the embedded task.

    python scripts/study.py --doc                        # about an hour on 2 cores; docs/results.md
    python scripts/study.py --policy runs/demo/sft --critic runs/demo/rl/checkpoint/critic \\
        --critic_policy runs/demo/rl/checkpoint/policy    # the demo's models, the critic graded too
    python scripts/study.py --tiny --output_dir /tmp/study   # every stage at a smoke-test size

Writes under --output_dir: values/ (values.csv, values.json, sibling_accuracy.png), search/ and forcing/
(results.csv, problems.csv, summary.json, accuracy_vs_tokens.png, accuracy_vs_flops.png), prm/ (the
trained process reward model), summary.json. With --doc it also writes the "Values that guide search"
section of docs/results.md and copies the plots and CSVs to docs/img/study/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from lab.study import StudyConfig, TINY_STUDY, run_study
from lab.study_report import SECTION, section_body
from planner.logs import configure_logging
from rl.cli import ArgumentParser, add_dataclass_arguments, dataclass_from_args

REPO = Path(__file__).resolve().parents[1]
COPIED = {"values/sibling_accuracy.png": "sibling_accuracy.png", "values/values.csv": "values.csv",
          "search/accuracy_vs_flops.png": "search_accuracy_vs_flops.png",
          "search/accuracy_vs_tokens.png": "search_accuracy_vs_tokens.png", "search/results.csv": "search.csv",
          "forcing/accuracy_vs_tokens.png": "forcing_accuracy_vs_tokens.png", "forcing/results.csv": "forcing.csv",
          "summary.json": "summary.json"}
"""Run artifacts -> their names under docs/img/study/."""


def main(argv=None) -> int:
    parser = ArgumentParser(description=__doc__)
    add_dataclass_arguments(parser, StudyConfig)
    parser.add_argument("--tiny", action="store_true", help="every stage at a smoke-test size (TINY_STUDY)")
    parser.add_argument("--doc", action="store_true", help="write the section of docs/results.md and copy the "
                                                           "plots and CSVs to docs/img/study/")
    parser.add_argument("--verbose", action="store_true", help="the engines' logs too")
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        config = dataclass_from_args(StudyConfig, args, defaults=TINY_STUDY if args.tiny else None)
    except ValueError as error:
        parser.error(str(error))

    summary = run_study(config)
    out, images = Path(config.output_dir), REPO / "docs" / "img" / "study"
    artifacts = []
    if args.doc:
        from benchdoc import machine_line, update_section

        images.mkdir(parents=True, exist_ok=True)
        for source, name in COPIED.items():
            if (out / source).is_file():
                shutil.copy(out / source, images / name)
                artifacts.append(f"docs/img/study/{name}")
    command = ".venv/bin/python scripts/study.py " + " ".join(sys.argv[1:] if argv is None else argv)
    body = section_body(summary, command, "", ", ".join(artifacts) or str(out))
    print(body)
    if args.doc:
        body = section_body(summary, command, machine_line(), ", ".join(artifacts))
        update_section(SECTION, body, doc=REPO / "docs" / "results.md",
                       header="# Results\n\nMeasured comparisons; each section names the command that wrote it.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
