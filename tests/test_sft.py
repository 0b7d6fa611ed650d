"""Cold-start SFT: the trainer learns, masks the prompt, saves a loadable folder, rejects bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from lab.cold_start import COLD_START_SFT, cold_start, pass_rates
from planner.policy import SamplingParams, load_policy
from planner.policy.local_models import build_char_tokenizer, build_tiny_llama
from rl.runtime import cpu_supports_bfloat16
from rl.sft import SFTConfig, collate, encode_pair, load_pairs, lr_factor, response_nll, train_sft
from verifiers.arithmetic import ARITHMETIC_ALPHABET, arithmetic_task
from verifiers.tasks import reward


@pytest.fixture()
def arithmetic_model_dir(tmp_path):
    return build_tiny_llama(tmp_path / "tiny", alphabet=ARITHMETIC_ALPHABET, hidden_size=32, num_layers=2,
                            num_heads=2, seed=0)


def _pairs(n, seed=0):
    return [(p.question, p.meta["solution"]) for p in arithmetic_task(n, "easy", seed=seed)]


def test_training_lowers_the_loss_changes_every_parameter_and_saves_a_loadable_folder(arithmetic_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(arithmetic_model_dir).state_dict().items()}
    config = SFTConfig(lr=3e-3, batch_size=16, max_steps=40, warmup_steps=5, progress=False)
    out = tmp_path / "sft"
    result = train_sft(arithmetic_model_dir, _pairs(400), config, output_dir=out)
    assert result.steps == 40 and result.stopped_by == "max_steps" and len(result.losses) == 40
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < 0.6 * first, (first, last)
    after = result.model.state_dict()
    unchanged = [k for k, v in before.items() if torch.equal(v, after[k])]
    assert not unchanged, f"parameters that did not change: {unchanged}"

    policy = load_policy(out, "hf")
    for k, v in policy.model.state_dict().items():
        assert torch.equal(v, after[k]), k
    groups = policy.generate([policy.encode_prompt("12+34=?")], SamplingParams(n=2, max_tokens=20, seed=0))
    assert len(groups[0]) == 2 and all(0 < len(s.token_ids) <= 20 for s in groups[0])
    assert json.loads((out / "sft_history.json").read_text())["losses"] == result.losses


def test_prompt_is_encoded_as_the_policy_encodes_it(arithmetic_model_dir):
    policy = load_policy(arithmetic_model_dir, "hf")
    ids, prompt_len = encode_pair(policy.tokenizer, "12+34=?", "<think>2+4=6\n1+3=4\n</think>46")
    assert ids[:prompt_len] == policy.encode_prompt("12+34=?")
    assert policy.decode(ids[prompt_len:]) == "<think>2+4=6\n1+3=4\n</think>46"
    assert ids[-1] == policy.tokenizer.eos_token_id
    plain = build_char_tokenizer(ARITHMETIC_ALPHABET)
    plain.chat_template = None
    ids, prompt_len = encode_pair(plain, "1+2=?", "3")
    assert plain.decode(ids[:prompt_len], skip_special_tokens=True) == "1+2=?"


def test_loss_reads_response_tokens_only():
    tokenizer = build_char_tokenizer(ARITHMETIC_ALPHABET)
    encoded = [encode_pair(tokenizer, "12+34=?", "<think>2+4=6\n</think>46"),
               encode_pair(tokenizer, "5-3=?", "<think>5-3=2\n</think>2")]
    input_ids, attention_mask, loss_mask = collate(encoded, tokenizer.pad_token_id)
    assert loss_mask.sum() == sum(len(ids) - n for ids, n in encoded)
    assert attention_mask.sum() == sum(len(ids) for ids, _ in encoded)
    torch.manual_seed(0)
    logits = torch.randn(*input_ids.shape, len(tokenizer))  # (B, L, V)
    loss = response_nll(logits, input_ids, loss_mask)

    prompt_changed = input_ids.clone()
    prompt_changed[0, 1:encoded[0][1]] = (prompt_changed[0, 1:encoded[0][1]] + 1) % len(tokenizer)
    assert torch.equal(response_nll(logits, prompt_changed, loss_mask), loss)

    response_changed = input_ids.clone()
    position = encoded[0][1] + 2
    response_changed[0, position] = (response_changed[0, position] + 1) % len(tokenizer)
    assert not torch.allclose(response_nll(logits, response_changed, loss_mask), loss)


def test_bad_input_raises_one_clear_error_each(arithmetic_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        train_sft(arithmetic_model_dir, tmp_path / "missing.jsonl", SFTConfig(max_steps=1, progress=False))
    with pytest.raises(ValueError, match="empty"):
        train_sft(arithmetic_model_dir, [], SFTConfig(max_steps=1, progress=False))
    (tmp_path / "blank.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        train_sft(arithmetic_model_dir, tmp_path / "blank.jsonl", SFTConfig(max_steps=1, progress=False))
    for lr in (0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match=r"SFTConfig.lr must be a finite number > 0"):
            SFTConfig(lr=lr)
    with pytest.raises(ValueError, match="schedule"):
        SFTConfig(schedule="step")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "1+1=?"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_pairs(tmp_path / "bad.jsonl")


def test_jsonl_pairs_train_and_evaluation_can_stop_training(arithmetic_model_dir, tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"prompt": q, "response": r}) + "\n" for q, r in _pairs(20)))
    assert load_pairs(path) == _pairs(20)
    calls = []

    def eval_fn(step, model, tokenizer):
        calls.append((step, model.training))
        return {"step_seen": float(step)}

    config = SFTConfig(batch_size=4, max_steps=50, eval_every=5, progress=False)
    result = train_sft(arithmetic_model_dir, path, config, eval_fn=eval_fn, should_stop=lambda m: m["step_seen"] >= 10)
    assert result.stopped_by == "should_stop" and result.steps == 10
    assert calls == [(5, False), (10, False)]
    assert [row["step"] for row in result.history] == [5, 10] and result.history[1]["step_seen"] == 10.0


def test_early_stopping_keeps_the_weights_of_the_best_evaluation(arithmetic_model_dir):
    scripted = iter([0.1, 0.5, 0.3, 0.5, 0.2, 0.9])  # best at the 2nd evaluation (a tie later is not better)
    snapshots = {}

    def eval_fn(step, model, tokenizer):
        snapshots[step] = {k: v.clone() for k, v in model.state_dict().items()}
        return {"pass@1": next(scripted)}

    config = SFTConfig(batch_size=4, max_steps=50, eval_every=2, best_metric="pass@1", patience=3, progress=False)
    result = train_sft(arithmetic_model_dir, _pairs(20), config, eval_fn=eval_fn)
    assert (result.stopped_by, result.steps, result.best_step) == ("patience", 10, 4)  # 3 evaluations after step 4
    kept = result.model.state_dict()
    assert all(torch.equal(kept[k], snapshots[4][k]) for k in kept)
    assert not all(torch.equal(kept[k], snapshots[10][k]) for k in kept)
    with pytest.raises(KeyError, match="best_metric is 'accuracy'"):
        train_sft(arithmetic_model_dir, _pairs(20), replace(config, best_metric="accuracy"), eval_fn=eval_fn)
    with pytest.raises(ValueError, match="patience"):
        SFTConfig(patience=2)


def test_learning_rate_schedule():
    cosine = SFTConfig(lr=1.0, max_steps=110, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, cosine) == pytest.approx(0.1) and lr_factor(9, cosine) == pytest.approx(1.0)
    assert lr_factor(60, cosine) == pytest.approx(0.55) and lr_factor(110, cosine) == pytest.approx(0.1)
    linear = replace(cosine, schedule="linear")
    assert lr_factor(35, linear) == pytest.approx(1 - 0.9 * 0.25)
    assert lr_factor(1000, replace(cosine, schedule="constant")) == 1.0


def test_pass_rates_count_samples_and_problems(scripted_policy):
    problems = arithmetic_task(2, "easy", seed=0)
    policy = scripted_policy({})
    keys = [policy.decode(policy.encode_prompt(p.question)) for p in problems]
    policy.table = {keys[0]: [(problems[0].meta["solution"], -0.1, "stop"), ("<think>\n</think>0", -0.1, "stop")],
                    keys[1]: [("<think>\n</think>0", -0.1, "stop")]}
    rates = pass_rates(policy, problems, reward, n=2, max_tokens=40)
    assert (rates["pass@1"], rates["pass@2"]) == (0.25, 0.5)
    # per-problem rates 0.5 and 0: a bootstrap over two problems can draw both twice (0.5 or 0) or one of each
    assert (rates["pass@1_low"], rates["pass@1_high"]) == (0.0, 0.5)


def test_cold_start_smoke(tmp_path):
    config = replace(COLD_START_SFT, batch_size=8, eval_every=4)
    result = cold_start(tmp_path / "cold", difficulty="easy", target_pass_range=(0.5, 0.9), max_minutes=0.05,
                        config=config, hidden_size=32, num_layers=1, num_heads=2, num_train=200, eval_problems=4,
                        eval_samples=1, final_samples=2, progress=False)
    assert result.curve and {"step", "seconds", "loss", "pass@1"} <= set(result.curve[0])
    assert result.steps >= 4 and not result.in_range
    assert set(result.final) == {"greedy_pass@1", "sampled_pass@1", "pass@2"}
    assert load_policy(result.model_dir, "hf").num_parameters > 0
    best = cold_start(tmp_path / "best", difficulty="easy", target_pass_range=None, max_minutes=0.1,
                      config=replace(config, best_metric="pass@1", patience=1),
                      hidden_size=32, num_layers=1, num_heads=2, num_train=50, eval_problems=4, eval_samples=1,
                      final_eval=False, progress=False)
    assert best.best_step is not None and best.best_step in [row["step"] for row in best.curve]


def test_gradient_checkpointing_and_bfloat16(arithmetic_model_dir):
    """Checkpointing recomputes the same float32 arithmetic: the first step's loss is identical and the
    next ones agree to 1e-4 (float32 summation order only, amplified by two AdamW steps at lr 1e-3,
    far below the loss scale of ~3). bfloat16 autocast: finite losses that fall, float32 weights kept (on a
    CPU with bf16 instructions; elsewhere one clear error)."""
    from transformers import AutoModelForCausalLM

    config = SFTConfig(lr=1e-3, batch_size=8, max_steps=3, warmup_steps=0, progress=False)
    plain = train_sft(arithmetic_model_dir, _pairs(24), config).losses
    checkpointed = train_sft(arithmetic_model_dir, _pairs(24), replace(config, gradient_checkpointing=True)).losses
    assert checkpointed[0] == pytest.approx(plain[0], abs=1e-6)
    assert checkpointed == pytest.approx(plain, abs=1e-4)
    if cpu_supports_bfloat16():
        result = train_sft(arithmetic_model_dir, _pairs(200), replace(config, dtype="bfloat16", max_steps=20, lr=3e-3))
        assert all(torch.isfinite(torch.tensor(result.losses)))
        assert sum(result.losses[-5:]) < sum(result.losses[:5])
        assert all(p.dtype == torch.float32 for p in result.model.parameters())
        before = AutoModelForCausalLM.from_pretrained(arithmetic_model_dir).state_dict()
        assert any(not torch.equal(v, before[k]) for k, v in result.model.state_dict().items())
    else:  # a CPU without bf16 instructions refuses with one clear error
        with pytest.raises(ValueError, match=r"SFTConfig.dtype='bfloat16' on the CPU needs bf16 instructions"):
            replace(config, dtype="bfloat16")
    with pytest.raises(ValueError, match=r"SFTConfig.dtype must be one of \['float32', 'bfloat16'\]"):
        SFTConfig(dtype="float16")
