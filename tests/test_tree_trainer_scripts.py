"""The scripts of the trainers beside GRPO: every option documented in --help, a smoke run of each, and
one clear error on bad input."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl.tree_store import TreeStore
from verifiers.types import Problem

REPO = Path(__file__).resolve().parents[1]


def script(*args, timeout=600):
    return subprocess.run([sys.executable, str(REPO / "scripts" / args[0]), *args[1:]], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def in_process(capsys, monkeypatch, name: str, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `scripts/<name> args` run by its `main(argv)` in this process: for
    command lines that only print help or refuse their input, which need no process of their own (the
    smoke runs below start each script as a process). COLUMNS=80 gives argparse the width it has in a
    process whose output is a pipe."""
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    try:
        code = importlib.import_module(name.removesuffix(".py")).main(list(args))
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return 0 if code is None else code, out, err


@pytest.mark.parametrize("command", [["train_dpo.py", "online"], ["train_dpo.py", "offline"], ["train_rs_sft.py"],
                                     ["train_reward_model.py"], ["compare_trainers.py"]])
def test_every_option_is_documented(command, capsys, monkeypatch):
    code, stdout, stderr = in_process(capsys, monkeypatch, *command, "--help")
    assert code == 0, stderr
    options = set(re.findall(r"^  (--[\w.]+)", stdout, flags=re.M))
    assert len(options) >= 5
    for block in re.split(r"\n(?=  --)", stdout):
        match = re.match(r"  (--[\w.]+)[^\n]*\n?(.*)", block, flags=re.S)
        if match and match.group(1) != "--help":
            first_line = block.split("\n")[0]
            text = first_line.split("  ", 2)[-1] if first_line.count("  ") > 1 else match.group(2)
            assert text.strip(), f"{command}: {match.group(1)} has no help text"
    assert "online" in in_process(capsys, monkeypatch, "train_dpo.py", "--help")[1]


@pytest.fixture(scope="module")
def store_and_model(tmp_path_factory):
    """A tiny policy and a tree store of hand-built trees (two prompts, different outcomes)."""
    from planner.policy.local_models import build_tiny_llama
    from planner.tree import SearchTree

    folder = tmp_path_factory.mktemp("scripts")
    model = build_tiny_llama(folder / "policy", seed=0)
    trees, problems = [], []
    for n in range(6):
        tree = SearchTree.new([1, 20 + n])
        step = tree.add_child(0, [30], [-0.3])
        for ids, reward in (([40, 2], 1.0), ([41, 2], 0.0)):
            tree[tree.add_child(step, ids, [-0.4, -0.2], terminal=True)].reward = reward
        tree[tree.add_child(0, [31, 2], [-0.5, -0.1], terminal=True)].reward = 0.0
        trees.append(tree)
        problems.append(Problem(id=f"p{n}", question=f"q{n}", reference="r", task="toy"))
    store = TreeStore(folder / "trees.jsonl").start(0)
    store.append(trees, problems, 0)
    return model, store.path, folder


def test_offline_dpo_and_reward_model_from_a_store(store_and_model):
    model, store, folder = store_and_model
    result = script("train_dpo.py", "offline", "--model", str(model), "--store", str(store), "--output_dir",
                    str(folder / "dpo"), "--dpo.loss_type", "ipo", "--dpo.beta", "0.5")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DPO on 18 pairs from 6 trees" in result.stdout  # per tree: 2 step pairs + 1 distinct response pair
    result = script("train_reward_model.py", "--model", str(model), "--store", str(store), "--output_dir",
                    str(folder / "orm"), "--epochs", "1", "--progress", "false", "--heldout_fraction", "0.34")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "8 training pairs" in result.stdout  # 4 trees x (right vs each of 2 wrong) and (folder / "orm" / "scorer.json").is_file()


def test_bad_input_is_one_clear_error(store_and_model, tmp_path, capsys, monkeypatch):
    """In this process: an exception other than the parser's exit would fail the test (a traceback)."""
    model, _, _ = store_and_model
    (tmp_path / "empty.jsonl").write_text("")
    code, _, stderr = in_process(capsys, monkeypatch, "train_reward_model.py", "--model", str(model), "--store",
                                 str(tmp_path / "empty.jsonl"), "--output_dir", str(tmp_path / "x"))
    assert code == 2 and "holds no trees" in stderr and "Traceback" not in stderr
    code, _, stderr = in_process(capsys, monkeypatch, "train_dpo.py", "offline", "--model", str(model), "--store",
                                 str(tmp_path / "empty.jsonl"), "--output_dir", str(tmp_path / "x"),
                                 "--dpo.loss_type", "hinge")
    assert code == 2 and "invalid choice: 'hinge'" in stderr
    code, _, stderr = in_process(capsys, monkeypatch, "train_rs_sft.py", "--model", str(tmp_path / "none"))
    assert code == 2 and "--model: no model folder at" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [["train_rs_sft.py", "--rs.min_reward", "0.0"], ["train_dpo.py", "online"]])
def test_online_smoke(store_and_model, tmp_path, command):
    model, _, _ = store_and_model
    result = script(*command, "--model", str(model), "--task", "arithmetic", "--limit", "4", "--loop.iterations", "1",
                    "--loop.prompts_per_iteration", "2", "--search.strategy", "best_of_n", "--search.best_of_n.n", "3",
                    "--search.best_of_n.max_tokens", "6", "--loop.output_dir", str(tmp_path / "run"), "--quiet",
                    "--loop.tree_store", str(tmp_path / "trees.jsonl"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "policy" / "config.json").is_file() and len(TreeStore(tmp_path / "trees.jsonl")) == 2
