"""docs/metrics.md documents every metric the trainer writes, and nothing it does not.

The runs that check the first half are the trainer's own tests: `assert_documented(history)` in
tests/test_trainer.py (GRPO, MCTS with a critic, PPO with GAE), tests/test_learner_options.py (the
mismatch and TIS metrics) and tests/test_loop_verifier.py. The second half is checked here, from the
source: a documented key the library no longer writes is a stale line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from rl.metrics import MEASURED

REPO = Path(__file__).resolve().parents[1]
METRICS_DOC = REPO / "docs" / "metrics.md"
ROW = re.compile(r"^\| `([a-z][a-z0-9_]*)` \|")

FORMED = {"policy_skipped": 'f"{what}_skipped"', "critic_skipped": 'f"{what}_skipped"'}
"""Keys the source builds rather than spells out, and how it builds them."""


def documented_metrics() -> set[str]:
    """The keys in the first column of docs/metrics.md's tables."""
    return {m.group(1) for line in METRICS_DOC.read_text().splitlines() if (m := ROW.match(line))}


def assert_documented(records: Iterable[dict]) -> None:
    """Every key of the trainer's metric records is a row of docs/metrics.md."""
    missing = sorted({key for record in records for key in record} - documented_metrics())
    assert not missing, f"metrics not documented in docs/metrics.md: {missing}"


def test_every_documented_metric_is_written_by_the_library():
    source = "\n".join(path.read_text() for path in sorted((REPO / "rl").glob("*.py")))
    documented = documented_metrics()
    assert {"iteration", "reward_mean", "pass_rate", "seconds"} <= documented  # the tables were read
    stale = sorted(key for key in documented if f'"{key}"' not in source and FORMED.get(key, "\0") not in source)
    assert not stale, f"docs/metrics.md documents keys no file in rl/ writes: {stale}"
    assert MEASURED <= documented


def test_the_progress_bar_postfix_is_documented():
    trainer = (REPO / "rl" / "trainer.py").read_text()
    postfix = re.search(r"set_postfix\((.*)\)", trainer).group(1)
    names = re.findall(r"(\w+)=", postfix)
    assert names == ["reward", "passed"], names
    text = METRICS_DOC.read_text()
    assert all(f"`{name}`" in text for name in names)
