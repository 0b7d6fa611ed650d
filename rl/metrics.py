"""Metrics of a training run: one JSON line, one CSV row and TensorBoard scalars per iteration."""

from __future__ import annotations

import csv
import json
from pathlib import Path

__all__ = ["MetricsLogger", "read_metrics", "MEASURED"]

MEASURED = frozenset({"seconds", "search_seconds", "learner_seconds", "push_seconds", "engine_sleep_seconds",
                      "peak_memory_mb"})
"""Metrics that measure the machine (wall seconds, memory), not the run's results: two runs of the same
settings agree on every other metric."""


class MetricsLogger:
    """Writes `metrics.jsonl` (the record), `metrics.csv` (for spreadsheets) and TensorBoard events."""

    def __init__(self, output_dir: str | Path, resume_from: int | None = None) -> None:
        """resume_from: the iteration a resumed run starts at; records of later iterations (written
        after the checkpoint, before the run was killed) are dropped. None starts a fresh file."""
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        kept = [r for r in read_metrics(self.dir) if r.get("iteration", 0) < resume_from] if resume_from else []
        self.jsonl.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter
            self._writer = SummaryWriter(str(self.dir / "tensorboard"))
        except ImportError:  # tensorboard is a dependency; keep logging files if it is absent
            self._writer = None

    def log(self, metrics: dict) -> None:
        with self.jsonl.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        rows = read_metrics(self.dir)
        columns = sorted({k for row in rows for k in row}, key=lambda k: (k != "iteration", k))
        with (self.dir / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        if self._writer is not None:
            step = int(metrics.get("iteration", 0))
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "iteration":
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(output_dir: str | Path) -> list[dict]:
    path = Path(output_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
