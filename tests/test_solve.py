"""planner.solve / solve_batch, and the scripts/solve.py command line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from planner.budget import Budget
from planner.monte_carlo import MonteCarloScorer
from planner.scorers import VerifierOracleScorer
from planner.solve import solve, solve_batch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "solve.py"


class Endless(dict):
    def __missing__(self, key):
        return [("1\n\n", -0.5, "step"), ("2", -0.7, "stop"), ("1", -0.2, "stop")]


def first_digit(text: str) -> str | None:
    digits = [c for c in text if c.isdigit()]
    return digits[0] if digits else None


def test_solve_applies_the_chat_template_and_reports_compute(scripted_policy):
    policy = scripted_policy(Endless())
    solution = solve("What is 1?", policy, "best_of_n", n=3, extract=first_digit)
    assert policy.seen_prompts[0] == policy.encode_prompt("What is 1?")  # chat template applied
    assert policy.decode(solution.tree.prompt_ids) == "What is 1?\n"  # role markers are special tokens
    assert solution.answer == "1" and solution.text in {"1\n\n", "1"}
    assert (solution.compute.generated_tokens, solution.compute.policy_calls) == (3 + 2 + 2, 1)
    assert solution.compute.flops == 2 * 1000 * (len(policy.seen_prompts[0]) + 7)
    plain = solve(SimpleNamespace(question="What is 1?"), policy, "best_of_n", chat=False, n=1, extract=first_digit)
    assert plain.tree.prompt_ids == policy.encode_prompt("What is 1?", chat=False)


def test_mcts_defaults_to_the_monte_carlo_scorer_and_an_integer_budget_is_tokens(scripted_policy, monkeypatch):
    policy = scripted_policy(Endless())
    made = []
    original = MonteCarloScorer.__init__
    monkeypatch.setattr(MonteCarloScorer, "__init__", lambda self, *a, **k: (made.append(k), original(self, *a, **k))[1])
    solution = solve("Q", policy, "mcts", budget=30, num_simulations=100, leaves_per_round=1, num_candidates=2,
                     max_step_tokens=4, max_steps=3, extract=first_digit)
    assert made and made[0]["max_tokens"] == 4 * 3  # rollouts run to the end of a response
    assert solution.tree.meta["strategy"] == "mcts" and all(
        solution.tree[c].score is not None for c in solution.tree[0].children)
    # 30 tokens at most, rollouts included: the budget is a ceiling (planner/budget.py)
    assert solution.compute.generated_tokens <= 30


def test_oracles_are_refused_unless_allowed(scripted_policy):
    policy = scripted_policy(Endless())
    oracle = VerifierOracleScorer("1", policy.decode, extract=first_digit, verify=lambda g, p: g == p)
    with pytest.raises(ValueError, match="training only: pass allow_oracle=True"):
        solve("Q", policy, "beam", scorer=oracle)
    with pytest.raises(ValueError, match="terminal_reward .* allow_oracle=True"):
        solve("Q", policy, "mcts", terminal_reward=lambda text: 1.0)
    allowed = solve("Q", policy, "beam", scorer=oracle, allow_oracle=True, num_beams=2, beam_width=1, max_steps=2,
                    extract=first_digit)
    assert allowed.answer == "1"


def test_bad_strategy_or_option_names_the_allowed_ones(scripted_policy):
    policy = scripted_policy(Endless())
    with pytest.raises(ValueError, match=r"strategy must be one of \['beam', 'best_of_n', 'budget_forcing', "
                                         r"'dvts', 'mcts'\]; got 'astar'"):
        solve("Q", policy, "astar")
    with pytest.raises(ValueError, match=r"BeamConfig has no option\(s\) \['beams'\]"):
        solve("Q", policy, "beam", beams=4)


def test_a_prompt_past_the_context_is_one_clear_error_before_any_search(tiny_model_dir):
    import time

    from planner.policy import load_policy

    policy = load_policy(tiny_model_dir, backend="hf", seed=0)
    assert policy.context_length == 512  # build_tiny_llama's max_position_embeddings
    message = r"prompt is 100\d\d\d tokens but the model's context is 512 tokens .*shorten the problem"
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):  # 100k characters ran past 145 s unchecked
        solve("1" * 100_000, policy, "best_of_n", n=1, max_tokens=2)
    with pytest.raises(ValueError, match="problem 1's " + message):
        solve_batch(["1+1=?", "1" * 100_000], policy, "best_of_n", n=1, max_tokens=2)
    assert time.perf_counter() - start < 10 and policy.stats.calls == 0
    assert solve("1+1=?", policy, "best_of_n", n=1, max_tokens=2).compute.generated_tokens > 0


def test_solve_batch_seeds_each_problem(scripted_policy):
    policy = scripted_policy(Endless())
    solutions = solve_batch(["A", "B"], policy, "best_of_n", budget=Budget(generated_tokens=100), seed=3, n=2,
                            extract=first_digit)
    assert [s.tree.meta["seed"] for s in solutions] == [3, 4]
    assert [policy.decode(s.tree.prompt_ids) for s in solutions] == ["A\n", "B\n"]


@pytest.mark.parametrize("batched", [False, True])
def test_solve_batch_counts_a_shared_rollout_scorer_in_each_search(scripted_policy, batched):
    """A Monte-Carlo scorer passed to solve_batch samples with the policy: its rollouts must count in
    the generated tokens of the search that asked for them, and its calls in that search only."""
    policy = scripted_policy(Endless())
    scorer = MonteCarloScorer(policy, rollouts=2, max_tokens=8, extract=first_digit)
    before = policy.stats.copy()
    # one MCTS round each: the root's two children are scored in one scorer call, then completed
    solutions = solve_batch(["A", "B", "C"], policy, "mcts", scorer, seed=0, batched=batched, num_simulations=2,
                            leaves_per_round=2, num_candidates=2, step_delimiter="\n\n", max_steps=3,
                            extract=first_digit)
    spent = policy.stats - before
    assert sum(s.compute.generated_tokens for s in solutions) == spent.generated_tokens
    rollouts = sum(len(s.tree) for s in solutions)  # every search rolled out beyond its tree's own steps
    assert spent.generated_tokens > rollouts
    assert [s.compute.scorer_calls for s in solutions] == [1, 1, 1]


def load_script():
    spec = importlib.util.spec_from_file_location("solve_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_solves_a_problem_and_writes_jsonl(tiny_model_dir, tmp_path):
    script = load_script()
    out, trees = tmp_path / "out.jsonl", tmp_path / "trees"
    assert script.main(["--model", str(tiny_model_dir), "--problem", "2+2=?", "--strategy", "beam", "--budget", "40",
                        "--set", "num_beams=2", "--set", "beam_width=1", "--set", "max_step_tokens=5",
                        "--set", "max_steps=2", "--out", str(out), "--trees", str(trees)]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["question"] == "2+2=?" and row["strategy"] == "beam" and row["compute"]["generated_tokens"] > 0
    assert (trees / "00000.json").is_file()


def test_script_errors_are_one_clear_line(tmp_path, capsys):
    script = load_script()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--model", str(tmp_path / "nowhere"), "--problem", "x"])
    assert exit_info.value.code == 2 and "--model: no model folder at" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        script.main(["--model", str(tmp_path), "--problem", "x", "--strategy", "mcts", "--set", "beams=3"])
    assert "MCTSConfig has no option(s) ['beams']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--model", str(tmp_path), "--problem", "x", "--strategy", "astar"])
    assert "invalid choice: 'astar'" in capsys.readouterr().err


def test_script_reads_a_task_and_grades_it(tiny_model_dir, data_dir, tmp_path):
    script = load_script()
    out = tmp_path / "out.jsonl"
    assert script.main(["--model", str(tiny_model_dir), "--task", "gsm8k", "--limit", "2", "--strategy", "best_of_n",
                        "--set", "n=2", "--set", "max_tokens=6", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["gsm8k/test/0", "gsm8k/test/1"]
    assert all(r["reward"] in (0.0, 1.0) and r["reference"] for r in rows)


def test_each_interleaved_search_gets_a_real_policy_view(scripted_policy):
    """run_interleaved hands each job a `SearchView`, a Policy subclass: Policy.generate validates the
    prompts in that job's own thread and counts that job's tokens in the view's own stats."""
    from planner.policy import Policy, SamplingParams
    from planner.scheduler import SearchView, run_interleaved

    policy = scripted_policy(Endless())
    params = SamplingParams(n=2, max_tokens=8, seed=1)

    def good(view):
        assert isinstance(view, Policy) and isinstance(view, SearchView) and view.shared_policy is policy
        assert (view.tokenizer, view.num_parameters, view.eos_token_ids) == (
            policy.tokenizer, policy.num_parameters, policy.eos_token_ids)
        assert view.encode_prompt("A") == policy.encode_prompt("A") and view.decode(view.encode("ab")) == "ab"
        view.generate([view.encode("A")], params)
        return view.stats.copy()

    def bad(view):
        with pytest.raises(ValueError, match="prompt 0 must be a non-empty list of token ids"):
            view.generate([[]], params)
        with pytest.raises(TypeError, match="cannot load weights"):
            view.load_weights({})
        return view.stats.copy()

    first, second, third = run_interleaved([good, bad, good], policy)
    assert policy.stats.calls == 1  # the two good requests were merged into one engine call
    assert (first.calls, first.prompt_tokens, first.generated_tokens) == (1, 1, 3 + 2)  # "1\n\n": 3 ids, "2" + EOS: 2
    assert (second.calls, second.generated_tokens) == (0, 0)
    assert third.generated_tokens + first.generated_tokens == policy.stats.generated_tokens
