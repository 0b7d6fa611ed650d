"""Every script in scripts/ meets bad input with one clear error, before any work: a table of bad
command lines, each expected to exit non-zero within seconds with at most two lines on stderr, no
traceback, and an error line that names the bad option.

Each row runs the script as its own process, with its own argv, exit status and stderr: a runner
process imports what every script imports first (torch, transformers, planner, rl: about 3.5 s of
CPU, 15 s on a busy 2-core machine) once, then forks a child per row that runs the script file as
`__main__` (`runpy`). So the table costs seconds, and a row's time is the script's own: a row that
loads a model or starts work is caught by `ROW_SECONDS`. `test_the_runner_is_the_plain_command` checks
one row against a plain `python scripts/...` subprocess.

Placeholders in a row's arguments: {model} a tiny model folder, {file} an existing file, {dir} an
existing folder, {ro} a folder nobody can write in (/sys/kernel), {empty} an empty tree store,
{out} a fresh path of the row's own, {tmp} the table's temporary folder. Each row's base arguments
are cheap on purpose: a row whose check is missing does seconds of work and exits 0 (and fails here)
instead of training for minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROW_SECONDS = 10
"""Most seconds one row may take once the imports are paid (a check at parse time takes well under one)."""
TIMEOUT = 120
"""A row still running after this many seconds is stopped (and fails)."""
RUNNER = r"""
import json, os, runpy, signal, sys, time, traceback
import torch, transformers, planner, rl, verifiers  # what every script imports before it parses
scripts = sys.argv[1]
for line in sys.stdin:
    row = json.loads(line)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the script as __main__, stdout dropped, stderr to the row's file
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.dup2(os.open(row["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.chdir(row["cwd"])
        sys.argv, sys.path[0] = row["argv"], scripts
        try:
            runpy.run_path(row["argv"][0], run_name="__main__")
            code = 0
        except SystemExit as done:  # as the interpreter does: an int is the status, anything else is printed
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
            if not isinstance(done.code, (int, type(None))):
                print(done.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.perf_counter() - start < row["timeout"]:
        time.sleep(0.05)
    if waited[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(waited[1]) if waited[0] else None
    print(json.dumps({"returncode": code, "seconds": time.perf_counter() - start}), flush=True)
"""
"""The runner: one row (JSON: argv, cwd, stderr file, timeout) per stdin line, one result per stdout line."""

SOLVE = ["solve.py", "--model", "{model}", "--task", "arithmetic", "--strategy", "best_of_n", "--set", "n=1",
         "--set", "max_tokens=2", "--limit", "1"]
TREES = ["--model", "{model}", "--task", "arithmetic", "--loop.iterations", "1", "--loop.prompts_per_iteration", "1",
         "--search.strategy", "best_of_n", "--search.best_of_n.n", "2", "--search.best_of_n.max_tokens", "2",
         "--loop.threads", "1", "--quiet", "--loop.output_dir", "{out}"]
TRAIN = [*TREES, "--value.critic.enabled", "false"]
VALUES = ["value_eval.py", "--policy", "{model}", "--backend", "hf", "--problems", "1", "--scorers", "random",
          "--samples", "1", "--candidates", "2", "--out", "{out}"]
SCALING = ["scaling.py", "--model", "{model}", "--task", "arithmetic", "--limit", "1", "--seeds", "0",
           "--size", "best_of_n=1", "--max_tokens", "2", "--quiet", "--out", "{out}"]
OFFLINE = ["train_dpo.py", "offline", "--model", "{model}", "--store", "{empty}", "--output_dir", "{out}"]
REWARD = ["train_reward_model.py", "--model", "{model}", "--store", "{empty}", "--output_dir", "{out}"]

# (id, category, command, text the error line must contain: the bad option)
ROWS = [
    # solve.py
    ("solve-limit-negative", "size below its minimum", [*SOLVE, "--limit", "-1"], "--limit"),
    ("solve-budget-zero", "size below its minimum", [*SOLVE, "--budget", "0"], "--budget"),
    ("solve-batch-size-zero", "size below its minimum", [*SOLVE, "--batch_size", "0"], "--batch_size"),
    ("solve-out-under-a-file", "output path", [*SOLVE, "--out", "{file}/x.jsonl"], "--out"),
    ("solve-out-is-a-folder", "output path", [*SOLVE, "--out", "{dir}"], "--out"),
    ("solve-out-read-only", "output path", [*SOLVE, "--out", "{ro}/x.jsonl"], "--out"),
    ("solve-trees-is-a-file", "output path", [*SOLVE, "--trees", "{file}"], "--trees"),
    ("solve-strategy-unknown", "name not in its registry", [*SOLVE, "--strategy", "astar"], "--strategy"),
    ("solve-task-unknown", "name not in its registry", [*SOLVE, "--task", "bogus"], "task"),
    ("solve-set-bad-value", "strategy option", [*SOLVE, "--set", "max_tokens=0"], "max_tokens"),
    ("solve-model-missing", "input path", [*SOLVE, "--model", "/nonexistent"], "--model"),
    ("solve-unknown-option", "unknown option", [*SOLVE, "--bogus"], "--bogus"),
    # train.py
    ("train-output-is-a-file", "output path", ["train.py", *TRAIN, "--loop.output_dir", "{file}"], "output_dir"),
    ("train-output-under-a-file", "output path", ["train.py", *TRAIN, "--loop.output_dir", "{file}/run"],
     "output_dir"),
    ("train-output-read-only", "output path", ["train.py", *TRAIN, "--loop.output_dir", "{ro}/run"], "output_dir"),
    ("train-tree-store-is-a-folder", "output path", ["train.py", *TRAIN, "--loop.tree_store", "{dir}"], "tree_store"),
    ("train-iterations-zero", "size below its minimum", ["train.py", *TRAIN, "--loop.iterations", "0"], "iterations"),
    ("train-limit-zero", "size below its minimum", ["train.py", *TRAIN, "--limit", "0"], "--limit"),
    ("train-estimator-unknown", "name not in its registry", ["train.py", *TRAIN, "--algorithm.estimator", "bogus"],
     "estimator"),
    ("train-minibatches-indivisible", "option combination",
     ["train.py", *TRAIN, "--loop.prompts_per_iteration", "3", "--learner.minibatches", "2"], "minibatches"),
    ("train-resume-without-checkpoint", "option combination", ["train.py", *TRAIN, "--resume"], "resume"),
    ("train-task-missing", "missing option", ["train.py", "--model", "{model}"], "--task"),
    # train_dpo.py
    ("dpo-mode-unknown", "name not in its registry", ["train_dpo.py", "bogus"], "mode"),
    ("dpo-store-missing", "input path", [*OFFLINE, "--store", "{tmp}/none.jsonl"], "--store"),
    ("dpo-output-is-a-file", "output path", [*OFFLINE, "--output_dir", "{file}"], "--output_dir"),
    ("dpo-beta-negative", "size below its minimum", [*OFFLINE, "--dpo.beta", "-1"], "beta"),
    ("dpo-online-model-missing", "input path", ["train_dpo.py", "online", "--model", "/nonexistent"], "--model"),
    # train_rs_sft.py
    ("rs-output-under-a-file", "output path", ["train_rs_sft.py", *TREES, "--loop.output_dir", "{file}/x"],
     "output_dir"),
    ("rs-limit-negative", "size below its minimum", ["train_rs_sft.py", *TREES, "--limit", "-1"], "--limit"),
    ("rs-max-per-prompt-zero", "size below its minimum", ["train_rs_sft.py", *TREES, "--rs.max_per_prompt", "0"],
     "max_per_prompt"),
    # train_reward_model.py
    ("reward-store-missing", "input path", [*REWARD, "--store", "{tmp}/none.jsonl"], "--store"),
    ("reward-output-read-only", "output path", [*REWARD, "--output_dir", "{ro}/rm"], "--output_dir"),
    ("reward-model-missing", "input path", [*REWARD, "--model", "/nonexistent"], "--model"),
    # compare_trainers.py
    ("compare-output-is-a-file", "output path", ["compare_trainers.py", "--output_dir", "{file}"], "output_dir"),
    ("compare-arms-unknown", "name not in its registry", ["compare_trainers.py", "--arms", "bogus"], "arms"),
    # value_eval.py
    ("values-policy-missing", "input path", [*VALUES, "--policy", "/nonexistent"], "--policy"),
    ("values-problems-negative", "size below its minimum", [*VALUES, "--problems", "-2"], "--problems"),
    ("values-scorer-unknown", "name not in its registry", [*VALUES, "--scorers", "bogus"], "--scorers"),
    ("values-critic-without-folder", "option combination", [*VALUES, "--scorers", "critic"], "--critic"),
    ("values-prm-not-a-prm", "input path", [*VALUES, "--scorers", "prm", "--prm", "{model}"], "--prm"),
    ("values-out-is-a-file", "output path", [*VALUES, "--out", "{file}"], "--out"),
    ("values-candidates-one", "size below its minimum", [*VALUES, "--candidates", "1"], "--candidates"),
    # scaling.py, combine_scaling.py
    ("scaling-out-is-a-file", "output path", [*SCALING, "--out", "{file}"], "--out"),
    ("scaling-out-under-a-file", "output path", [*SCALING, "--out", "{file}/x"], "--out"),
    ("scaling-out-read-only", "output path", [*SCALING, "--out", "{ro}/x"], "--out"),
    ("scaling-strategy-unknown", "name not in its registry", [*SCALING, "--strategies", "bogus"], "strategies"),
    ("scaling-size-zero", "size below its minimum", [*SCALING, "--size", "best_of_n=0"], "size"),
    ("combine-runs-missing", "input path", ["combine_scaling.py", "--runs", "{tmp}/none", "--out", "{out}"],
     "--runs"),
    ("combine-out-is-a-file", "output path", ["combine_scaling.py", "--runs", "{dir}", "--out", "{file}"], "--out"),
    # study.py, demo.py
    ("study-output-is-a-file", "output path", ["study.py", "--output_dir", "{file}"], "output_dir"),
    ("study-problems-zero", "size below its minimum", ["study.py", "--problems", "0"], "problems"),
    ("study-policy-missing", "input path", ["study.py", "--policy", "/nonexistent"], "policy"),
    ("demo-output-under-a-file", "output path", ["demo.py", "--output_dir", "{file}/demo"], "output_dir"),
    ("demo-candidates-zero", "size below its minimum", ["demo.py", "--rl_candidates", "0"], "rl_candidates"),
]
@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """The placeholders' values (see the module docstring)."""
    from planner.policy.local_models import build_tiny_llama

    tmp = tmp_path_factory.mktemp("bad-inputs")
    model = build_tiny_llama(tmp / "model", seed=0)
    (tmp / "a-file").write_text("not a folder\n")
    (tmp / "a-folder").mkdir()
    (tmp / "empty.jsonl").write_text("")
    return {"model": str(model), "file": str(tmp / "a-file"), "dir": str(tmp / "a-folder"), "ro": "/sys/kernel",
            "empty": str(tmp / "empty.jsonl"), "tmp": str(tmp)}


def row_argv(row, places: dict[str, str]) -> list[str]:
    """The row's command line: the script's path, then its arguments with the placeholders filled in."""
    name, _, command, _ = row
    values = {**places, "out": str(Path(places["tmp"]) / "out" / name)}
    return [str(REPO / "scripts" / command[0]), *(part.format(**values) for part in command[1:])]


def run_rows(rows, places: dict[str, str]) -> dict[str, dict]:
    """Every row through one runner process: row id -> exit status (None: stopped), stderr and seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(REPO / "scripts")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env, cwd=places["tmp"])
    outcomes = {}
    try:
        for row in rows:
            stderr = Path(places["tmp"]) / f"{row[0]}.stderr"
            runner.stdin.write(json.dumps({"argv": row_argv(row, places), "cwd": places["tmp"],
                                           "stderr": str(stderr), "timeout": TIMEOUT}) + "\n")
            runner.stdin.flush()
            line = runner.stdout.readline()
            assert line, "the runner process ended"
            outcomes[row[0]] = {**json.loads(line), "stderr": stderr.read_text(errors="replace")}
    finally:
        runner.stdin.close()
        runner.wait(timeout=60)
    return outcomes


@pytest.fixture(scope="module")
def outcomes(places) -> dict[str, dict]:
    return run_rows(ROWS, places)


def test_the_table_covers_every_script():
    scripts = {row[2][0] for row in ROWS}
    assert scripts == {"solve.py", "train.py", "train_dpo.py", "train_rs_sft.py", "train_reward_model.py",
                       "compare_trainers.py", "value_eval.py", "scaling.py", "combine_scaling.py", "study.py",
                       "demo.py"}
    assert len(ROWS) >= 40 and len({row[0] for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", [pytest.param(row, id=row[0]) for row in ROWS])
def test_bad_input_is_one_clear_error_before_any_work(row, outcomes):
    name, _, _, option = row
    outcome = outcomes[name]
    stderr = outcome["stderr"].strip()
    lines = stderr.splitlines()
    assert outcome["returncode"] not in (0, None), f"{name}: exit {outcome['returncode']}; stderr:\n{stderr[-2000:]}"
    assert "Traceback" not in stderr, f"{name}:\n{stderr[-3000:]}"
    assert 1 <= len(lines) <= 2, f"{name}: {len(lines)} stderr lines:\n{stderr[-2000:]}"
    assert option in lines[-1] and "error" in lines[-1], f"{name}: the error does not name {option!r}: {lines[-1]}"
    assert outcome["seconds"] < ROW_SECONDS, f"{name}: {outcome['seconds']:.1f} s: work started before the check"


def test_the_runner_is_the_plain_command(places, outcomes):
    row = next(r for r in ROWS if r[0] == "values-scorer-unknown")
    plain = subprocess.run([sys.executable, *row_argv(row, places)], capture_output=True, text=True, timeout=TIMEOUT,
                           cwd=places["tmp"], env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (plain.returncode, plain.stderr) == (outcomes[row[0]]["returncode"], outcomes[row[0]]["stderr"])


def test_parser_errors_are_one_line(capsys):
    from rl.cli import ArgumentParser, at_least

    parser = ArgumentParser(prog="x.py")
    for k in range(50):
        parser.add_argument(f"--option_{k}", help="one of many options")
    parser.add_argument("--n", type=at_least(1))
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--n", "0"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "x.py: error: argument --n: must be an integer >= 1; got '0' (see --help)\n"


def test_configs_refuse_bad_paths_from_python_too(tmp_path):
    from rl.config import LoopConfig, TrainConfig

    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match=r"TrainConfig.loop.output_dir '.*a-file' is a file, not a folder"):
        TrainConfig(loop=LoopConfig(output_dir=str(tmp_path / "a-file")))
    with pytest.raises(ValueError,
                       match=r"TrainConfig.loop.output_dir '.*a-file/run': '.*a-file' is a file, so nothing"):
        TrainConfig(loop=LoopConfig(output_dir=str(tmp_path / "a-file" / "run")))
    with pytest.raises(ValueError, match=r"TrainConfig.loop.tree_store '.*' is a folder, not a file"):
        TrainConfig(loop=LoopConfig(output_dir=str(tmp_path / "run"), tree_store=str(tmp_path)))
    with pytest.raises(ValueError,
                       match=r"TrainConfig.loop.output_dir '/sys/kernel/run': cannot write in '/sys/kernel'"):
        TrainConfig(loop=LoopConfig(output_dir="/sys/kernel/run"))
    TrainConfig(
        loop=LoopConfig(output_dir=str(tmp_path / "new" / "run"), tree_store=str(tmp_path / "new" / "trees.jsonl")))
    assert not (tmp_path / "new").exists()  # checking creates nothing
