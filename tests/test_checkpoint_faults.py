"""Checkpoints under faults (rl/checkpoint.py, docs/reliability.md "Checkpoints"), on the tiny model.

- a save keeps the last k checkpoints, each with a manifest of every file's size and sha256;
- a truncated model.safetensors or state.pt, or a deleted state.pt: --resume falls back to the previous
  valid checkpoint, says so in one line, and the run continues exactly as the uninterrupted one;
- a state.pt with a pickle payload (its manifest rewritten to match) is refused: the payload never runs;
- a process SIGKILLed between iterations, or inside a save (before or after its rename), resumes from
  the newest complete checkpoint to the same metrics as an uninterrupted run (one run all the tests share);
- --resume with no checkpoint, none valid, or one of the old pickled format is one clear error: exit 2,
  no traceback, at most 2 lines on stderr.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rl import checkpoint
from rl.checkpoint import CheckpointError
from rl.config import CriticConfig
from rl.metrics import MEASURED, read_metrics
from rl.trainer import SearchTrainer

from test_trainer import PROBLEMS, REPO, config, digit_fraction, merged, train_command  # noqa: F401

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def strip(rows):
    return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]


def settings(model_dir, out, **changes):
    return config(model_dir, out, **merged({"loop": dict(iterations=3, checkpoint_every=1, deterministic=True),
                                            "value": dict(critic=CriticConfig(enabled=True))}, changes))


@pytest.fixture(scope="module")
def finished(rl_model_dir, tmp_path_factory):
    """A 3-iteration run (policy and critic) that saved after every iteration: checkpoints 2 and 3 kept."""
    out = tmp_path_factory.mktemp("finished") / "run"
    SearchTrainer(settings(rl_model_dir, out), PROBLEMS, digit_fraction).run(progress=False)
    return out


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run to damage."""
    copy = tmp_path / "run"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


def newest(out: Path) -> Path:
    return out / "checkpoints" / "iteration-000003"


def reseal(folder: Path, name: str) -> None:
    """Rewrite the manifest's entry of `name` to the file's present size and sha256 (a deliberate edit)."""
    manifest = json.loads((folder / checkpoint.MANIFEST).read_text())
    data = (folder / name).read_bytes()
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / checkpoint.MANIFEST).write_text(json.dumps(manifest))


def test_a_save_keeps_the_last_k_each_complete_and_a_new_run_replaces_them(finished, rl_model_dir, tmp_path):
    assert sorted(p.name for p in (finished / "checkpoints").iterdir()) == ["iteration-000002", "iteration-000003"]
    assert checkpoint.checkpoint_dir(finished).resolve() == newest(finished).resolve()
    assert (finished / "checkpoint" / "policy" / "config.json").is_file()  # the newest policy, servable
    manifest = json.loads((newest(finished) / checkpoint.MANIFEST).read_text())
    assert manifest["iteration"] == 3
    on_disk = {p.relative_to(newest(finished)).as_posix() for p in newest(finished).rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {checkpoint.MANIFEST}
    assert {"state.pt", "policy/model.safetensors", "critic/model.safetensors"} <= set(manifest["files"])
    for name, entry in manifest["files"].items():
        data = (newest(finished) / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    # a run that does not resume replaces an earlier run's checkpoints at its first save
    copy = tmp_path / "run"
    shutil.copytree(finished, copy, symlinks=True)
    SearchTrainer(settings(rl_model_dir, copy, loop=dict(iterations=1, checkpoints_kept=3)), PROBLEMS,
                  digit_fraction).run(progress=False)
    assert [p.name for p in (copy / "checkpoints").iterdir()] == ["iteration-000001"]
    assert checkpoint.checkpoint_dir(copy).resolve().name == "iteration-000001"


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damage, reason", [
    (lambda f: truncate(f / "policy" / "model.safetensors"), r"policy/model.safetensors has \d+ bytes, the manifest"),
    (lambda f: truncate(f / "state.pt"), r"state.pt has \d+ bytes, the manifest says \d+: truncated"),
    (lambda f: (f / "state.pt").unlink(), r"state.pt is missing"),
    (lambda f: (f / checkpoint.MANIFEST).unlink(), r"no manifest.json: its save did not finish"),
], ids=["truncated-weights", "truncated-state", "deleted-state", "no-manifest"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_and_continues_exactly(
        run, finished, rl_model_dir, caplog, damage, reason):
    damage(newest(run))
    caplog.set_level(logging.INFO, logger="rl.checkpoint")
    trainer = SearchTrainer(settings(rl_model_dir, run), PROBLEMS, digit_fraction, resume=True)
    assert trainer.iteration == 2
    lines = [r for r in caplog.records if r.name == "rl.checkpoint"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert lines[0].getMessage().startswith(f"resuming from {run / 'checkpoints' / 'iteration-000002'} (iteration 2); "
                                            "skipped newer: iteration-000003 (")
    assert re.search(reason, lines[0].getMessage()), lines[0].getMessage()
    trainer.run(progress=False)
    assert strip(read_metrics(run)) == strip(read_metrics(finished))
    for name in ("policy/model.safetensors", "critic/model.safetensors", "state.pt"):  # the redone save is whole again
        assert (newest(run) / name).read_bytes() == (newest(finished) / name).read_bytes(), name


def test_a_pickle_payload_in_the_state_file_never_runs(run, rl_model_dir, tmp_path, caplog):
    """Even with its manifest rewritten to match (whoever can write the file can write the manifest),
    state.pt is read with weights_only=True: the payload is refused, not executed."""
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return open, (str(marker), "w")

    state = torch.load(newest(run) / "state.pt", weights_only=True)
    torch.save({**state, "optimizer": Payload()}, newest(run) / "state.pt")
    reseal(newest(run), "state.pt")
    caplog.set_level(logging.INFO, logger="rl.checkpoint")
    trainer = SearchTrainer(settings(rl_model_dir, run), PROBLEMS, digit_fraction, resume=True)
    assert not marker.exists()
    assert trainer.iteration == 2
    [line] = [r.getMessage() for r in caplog.records if r.name == "rl.checkpoint"]
    assert "iteration-000003 (state.pt holds more than tensors and plain Python values, refused unpickling" in line


def test_no_valid_checkpoint_is_one_error_naming_each_reason(run, rl_model_dir):
    truncate(newest(run) / "state.pt")
    (run / "checkpoints" / "iteration-000002" / "policy" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"no valid checkpoint to resume in .*checkpoints: iteration-000003 "
                                              r"\(state.pt has .*\); iteration-000002 \(policy/model.safetensors is "
                                              r"missing\); start a new --loop.output_dir"):
        SearchTrainer(settings(rl_model_dir, run), PROBLEMS, digit_fraction, resume=True)


def test_an_old_format_checkpoint_is_one_clear_error(rl_model_dir, tmp_path):
    legacy = tmp_path / "checkpoint"
    legacy.mkdir()
    torch.save({"iteration": 3}, legacy / "state.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint of the old format \(state.pt without manifest.json, read "
                                              r"with pickle\), which this version does not load"):
        SearchTrainer(settings(rl_model_dir, tmp_path), PROBLEMS, digit_fraction, resume=True)


@pytest.mark.parametrize("make", ["empty", "invalid"])
def test_resume_with_nothing_to_resume_exits_with_one_line_and_no_traceback(rl_model_dir, tmp_path, make):
    out = tmp_path / "run"
    if make == "invalid":
        (out / "checkpoints" / "iteration-000001").mkdir(parents=True)  # a folder without its manifest
    done = subprocess.run(train_command(rl_model_dir, out, 2, "--resume"), env=ENV, capture_output=True, text=True,
                          timeout=600)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) <= 2, done.stderr
    expected = ("nothing to resume: no checkpoint in" if make == "empty" else
                "no valid checkpoint to resume in")
    assert lines[-1].startswith(f"train.py: error: --resume: {expected}"), lines
    assert not read_metrics(out)  # nothing was started over


KILLER = """
import os, runpy, signal, sys
import rl.checkpoint as ck
point = sys.argv.pop(1)
sealed, link = ck._sealed, ck._link_newest
def die_sealing(path):  # the manifest written into the temporary folder: the last write before the rename
    if point == "before-rename" and path.name == ck.MANIFEST and path.parent.name == ".tmp-iteration-000003":
        os.kill(os.getpid(), signal.SIGKILL)
    return sealed(path)
def die_linking(output_dir, newest):  # renamed into place, neither linked nor the old ones pruned
    if point == "after-rename" and newest.name == "iteration-000003":
        os.kill(os.getpid(), signal.SIGKILL)
    return link(output_dir, newest)
ck._sealed, ck._link_newest = die_sealing, die_linking
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as for a script run directly: scripts/ holds its helpers
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def uninterrupted(rl_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    subprocess.run(train_command(rl_model_dir, out, 4), check=True, env=ENV, capture_output=True, timeout=600)
    return read_metrics(out)


@pytest.mark.parametrize("point, resumed_at", [("before-rename", 2), ("after-rename", 3)])
def test_sigkill_inside_a_save_resumes_from_the_newest_complete_checkpoint_exactly(
        rl_model_dir, tmp_path, uninterrupted, point, resumed_at):
    out = tmp_path / "run"
    command = train_command(rl_model_dir, out, 4)
    killed = subprocess.run([command[0], "-c", KILLER, point, *command[1:]], env=ENV, capture_output=True, text=True,
                            timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert len(read_metrics(out)) == 3  # iterations 0-2 logged, then killed saving checkpoint 3
    resumed = subprocess.run(train_command(rl_model_dir, out, 4, "--resume"), env=ENV, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    line = f"INFO rl.checkpoint: resuming from {out / 'checkpoints' / f'iteration-{resumed_at:06d}'} " \
           f"(iteration {resumed_at})"
    assert line in resumed.stderr.splitlines(), resumed.stderr[-2000:]
    assert strip(read_metrics(out)) == strip(uninterrupted)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["iteration-000003", "iteration-000004"]


def test_kill_minus_nine_between_iterations_then_resume_matches_an_uninterrupted_run(rl_model_dir, tmp_path,
                                                                                     uninterrupted):
    out = tmp_path / "killed"
    proc = subprocess.Popen(train_command(rl_model_dir, out, 4), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(read_metrics(out)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 2 <= len(read_metrics(out)) < 4, "the run must be killed part-way"
    subprocess.run(train_command(rl_model_dir, out, 4, "--resume"), check=True, env=ENV, capture_output=True,
                   timeout=600)
    assert strip(read_metrics(out)) == strip(uninterrupted)
    assert uninterrupted[-1]["iteration"] == 3
