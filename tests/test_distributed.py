"""The data-parallel learner on 2 gloo ranks launched by torchrun, on this CPU.

- the gradient over 2 ranks (each with half of the trees) equals the single-process gradient of the
  whole batch, for DDP and for FSDP2, in float32 to 1e-6: each rank's loss is normalised by the whole
  minibatch's counts and scaled by the world size, and the synchronisation averages, so the ranks'
  gradients add up to the whole batch's; only the order of the float32 summation differs (~1e-8 on
  gradients of ~1e-1 here);
- `torchrun --nproc_per_node 2 scripts/train.py ...` runs, logs once and checkpoints;
- a learner rank killed mid-run stops the whole run with torchrun's error naming the rank, and
  `--resume` continues from the last checkpoint to the same metrics as an uninterrupted run;
- a batch that cannot be shared out evenly is one clear error;
- end to end: 2 learner ranks over a pool of 2 engine replicas on a local Ray instance (rank 0 owns the
  pool), every iteration logged and its weights pushed to both replicas.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from rl.batch import batch_from_trees
from rl.config import CriticConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig, ValueConfig
from rl.learner import Learner
from rl.metrics import MEASURED, read_metrics

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("dist-tiny"), init_std=0.1, seed=1)


@pytest.fixture(scope="module")
def trees(model_dir, tmp_path_factory):
    """4 rewarded MCTS trees of the tiny model (2 per rank)."""
    from planner.strategies import MCTSConfig
    from rl.trainer import SearchTrainer

    from test_trainer import PROBLEMS, digit_fraction  # noqa: E402

    config = TrainConfig(
        model=str(model_dir),
        loop=LoopConfig(output_dir=str(tmp_path_factory.mktemp("dist-trees")), prompts_per_iteration=4),
        search=TreeSearchConfig(strategy="mcts",
                                mcts=MCTSConfig(num_simulations=4, num_candidates=2, leaves_per_round=2,
                                                max_step_tokens=4, max_steps=3, step_delimiter=" ", temperature=1.0)),
        value=ValueConfig(critic=CriticConfig(enabled=False)),
        learner=LearnerConfig(device="cpu"))
    found, _ = SearchTrainer(config, PROBLEMS, digit_fraction).grow_trees(PROBLEMS[:4], seed=3)
    return found


GRADIENT_OPTIONS = {"estimator": "grpo", "loss": {"aggregation": "seq_mean_token_mean", "entropy_coef": 0.01}}


@pytest.fixture(scope="module")
def parallel_gradients(model_dir, trees, tmp_path_factory) -> dict[str, dict]:
    """The gradients of one update on 2 ranks, for DDP and for FSDP2 ({mode: {"policy": ..., "critic": ...}}):
    one torchrun launch computes both (tests/dist_worker.py), each with a fresh learner."""
    folder = tmp_path_factory.mktemp("dist-grads")
    torch.save({"trees": trees, "config": GRADIENT_OPTIONS}, folder / "batch.pt")
    subprocess.run(torchrun(str(REPO / "tests" / "dist_worker.py"), str(folder / "batch.pt"), str(model_dir),
                            str(folder), "ddp,fsdp"), check=True, env=ENV, capture_output=True, timeout=600)
    return {mode: torch.load(folder / f"grads-{mode}.pt") for mode in ("ddp", "fsdp")}


@pytest.mark.parametrize("data_parallel", ["ddp", "fsdp"])
def test_two_ranks_give_the_single_process_gradient(model_dir, trees, parallel_gradients, tmp_path, data_parallel):
    options = GRADIENT_OPTIONS
    parallel = parallel_gradients[data_parallel]
    learner = Learner(TrainConfig(model=str(model_dir), loop=LoopConfig(output_dir=str(tmp_path)),
                                  learner=LearnerConfig(device="cpu", max_grad_norm=1e9),
                                  value=ValueConfig(critic=CriticConfig(enabled=True)), algorithm=options))
    single = {}
    for name, model, optimizer in (("policy", learner.policy, learner.optimizer),
                                   ("critic", learner.critic.model, learner.critic_optimizer)):
        step = optimizer.step
        optimizer.step = (lambda *a, _n=name, _m=model, _s=step, **k:
                          (single.__setitem__(_n, torch.cat([p.grad.flatten().clone() for p in _m.parameters()])),
                           _s(*a, **k))[1])
    learner.update(batch_from_trees(trees, pad_token_id=0), iteration=0)
    for name in ("policy", "critic"):
        assert single[name].abs().max() > 1e-3, name
        torch.testing.assert_close(parallel[name], single[name], rtol=0, atol=1e-6, msg=name)


def train_command(model_dir, out, iterations, *extra) -> list[str]:
    return torchrun(str(REPO / "scripts" / "train.py"), "--task", "gsm8k", "--split", "test", "--limit", "16",
                    "--model", str(model_dir), "--loop.output_dir", str(out), "--loop.iterations", str(iterations),
                    "--loop.prompts_per_iteration", "4", "--search.strategy", "mcts",
                    "--search.mcts.num_simulations", "4", "--search.mcts.max_step_tokens", "6",
                    "--search.mcts.max_steps", "2", "--search.mcts.step_delimiter", " ",
                    "--algorithm.estimator", "tree", "--learner.lr", "3e-3", "--loop.deterministic", "true",
                    "--loop.seed", "3", "--loop.checkpoint_every", "1", "--quiet", *extra)


def strip(rows):
    return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]


def test_torchrun_trains_on_two_ranks_and_a_killed_rank_stops_the_run_and_resume_continues(model_dir, tmp_path):
    full = tmp_path / "full"
    done = subprocess.run(train_command(model_dir, full, 3), env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(full)
    assert [r["iteration"] for r in rows] == [0, 1, 2]  # rank 0 alone logs
    assert (full / "checkpoint" / "policy" / "config.json").is_file()
    killed = tmp_path / "killed"
    run = subprocess.Popen(train_command(model_dir, killed, 3), env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while len(read_metrics(killed)) < 1 and time.time() < deadline and run.poll() is None:
        time.sleep(0.1)
    workers = [p for p in psutil.Process(run.pid).children(recursive=True) if "train.py" in " ".join(p.cmdline())]
    rank1 = next(p for p in workers if p.environ().get("RANK") == "1")
    rank1.send_signal(signal.SIGKILL)
    output, _ = run.communicate(timeout=600)
    assert run.returncode != 0
    assert "rank: 1" in output and "Signal 9 (SIGKILL)" in output, output[-3000:]
    assert 1 <= len(read_metrics(killed)) < 3
    resumed = subprocess.run(train_command(model_dir, killed, 3, "--resume"), env=ENV, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert strip(read_metrics(killed)) == strip(rows)


def test_a_batch_that_does_not_share_out_evenly_is_one_clear_error(model_dir, tmp_path):
    done = subprocess.run(train_command(model_dir, tmp_path, 1, "--loop.prompts_per_iteration", "3"), env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "prompts_per_iteration=3 trees cannot be shared out evenly to 2 ranks" in done.stderr


def test_two_learner_ranks_over_a_two_replica_engine_pool(model_dir, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "pooled"
    done = subprocess.run(train_command(model_dir, out, 2, "--engine.replicas", "2"), env=ENV, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0, 1]
    assert all(r["generated_tokens"] > 0 and r["trajectories"] > 0 for r in rows)
    assert [r["replicas_current"] for r in rows] == [2, 2]  # both replicas hold each iteration's pushed weights
