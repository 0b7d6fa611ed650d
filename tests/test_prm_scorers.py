"""Reward-model formats as planner scorers, each with a tiny model built here in that format (no hub).

One hand-built input for all: the question "3+4=?" (the policy's chat prompt) and the response
"<think>3+4=7\\n</think>7" + EOS, two steps: "<think>3+4=7" and "</think>7". Each test writes the
format's input text by hand, finds its marker positions by hand, and reads the model's outputs there.
"""

from __future__ import annotations

import math

import pytest
import torch

from planner.policy.local_models import DEFAULT_ALPHABET, build_char_tokenizer
from planner.prm_scorers import (MathShepherdScorer, QwenPRMScorer, SequenceRewardScorer, TokenValueScorer,
                                 load_scorer, split_steps, step_ends)
from planner.scorers import AGGREGATIONS

QUESTION, RESPONSE = "3+4=?", "<think>3+4=7\n</think>7"
STEPS = ["<think>3+4=7", "</think>7"]


@pytest.fixture(scope="module")
def policy_tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def prefix(policy_tokenizer):
    """(prompt + response ids as a policy samples them, prompt length)."""
    prompt = list(policy_tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}],
                                                       add_generation_prompt=True, tokenize=True)["input_ids"])
    response = policy_tokenizer.encode(RESPONSE) + [policy_tokenizer.eos_token_id]
    return prompt + response, len(prompt)


def decoder(tokenizer):
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)


def tiny(kind, tokenizer, folder, **config):
    """A random Llama of `kind` (transformers class name) over `tokenizer`, saved with it to `folder`."""
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=2, intermediate_size=64, pad_token_id=tokenizer.pad_token_id,
                                   initializer_range=0.5, **config)
    torch.manual_seed(0)
    model = getattr(transformers, kind)(cfg)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def check_aggregations(scorer, prefix, step_values):
    ids, prompt_len = prefix
    for how, rule in AGGREGATIONS.items():
        scorer.aggregation = how
        assert scorer.score([ids], prompt_len=prompt_len, finished=[True]) == pytest.approx([rule(step_values)],
                                                                                          abs=1e-6), how


def test_steps_of_a_response(policy_tokenizer):
    assert split_steps(RESPONSE, "\n") == STEPS and split_steps("a\nb\n", "\n") == ["a", "b"]
    ids = policy_tokenizer.encode("ab\ncd\n")
    assert step_ends(ids, decoder(policy_tokenizer), "\n") == [2, 5]
    assert step_ends(ids[:4], decoder(policy_tokenizer), "\n") == [2, 3]  # a step being written counts


def test_math_shepherd(policy_tokenizer, prefix, tmp_path):
    tokenizer = build_char_tokenizer(DEFAULT_ALPHABET)
    tokenizer.add_tokens(["ки"])
    folder = tiny("LlamaForCausalLM", tokenizer, tmp_path / "shepherd")
    scorer = MathShepherdScorer(folder, decode=decoder(policy_tokenizer))
    text = "3+4=? <think>3+4=7 ки\n</think>7 ки"  # the model card's input, by hand
    assert scorer.render(QUESTION, STEPS) == text
    ids = torch.tensor([tokenizer.encode(text)])
    tags = [len("3+4=? <think>3+4=7 "), len("3+4=? <think>3+4=7 ки\n</think>7 ") - 1]  # "ки" is one token
    assert ids[0, tags].tolist() == [tokenizer.convert_tokens_to_ids("ки")] * 2
    with torch.no_grad():
        logits = scorer.model(input_ids=ids).logits[0]
    plus, minus = tokenizer.convert_tokens_to_ids("+"), tokenizer.convert_tokens_to_ids("-")
    expected = [1 / (1 + math.exp(logits[t, minus] - logits[t, plus])) for t in tags]  # softmax over (+, -)
    assert scorer.step_values([(QUESTION, STEPS)]) == [pytest.approx(expected, abs=1e-6)]
    assert abs(expected[0] - expected[1]) > 1e-3  # two different steps, two different values
    check_aggregations(scorer, prefix, expected)


def test_a_tag_missing_from_the_tokenizer_raises_one_clear_error(tmp_path):
    tokenizer = build_char_tokenizer(DEFAULT_ALPHABET)
    folder = tiny("LlamaForCausalLM", tokenizer, tmp_path / "no-tag")
    with pytest.raises(ValueError, match=r"MathShepherdScorer.step_tag 'ки' is not a token of this tokenizer "
                                         r"\(it encodes to 0 ids \[\]\): pass the token the reward model was trained"):
        MathShepherdScorer(folder, decode=str)
    with pytest.raises(ValueError, match="QwenPRMScorer.separator '<extra_0>' is not a token of this tokenizer"):
        QwenPRMScorer(folder, decode=str)


def test_qwen_prm(policy_tokenizer, prefix, tmp_path):
    tokenizer = build_char_tokenizer(DEFAULT_ALPHABET)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    folder = tiny("LlamaForTokenClassification", tokenizer, tmp_path / "qwen", num_labels=2)
    scorer = QwenPRMScorer(folder, decode=decoder(policy_tokenizer), system_prompt="Think.")
    text = "<|system|>Think.\n<|user|>3+4=?\n<|assistant|><think>3+4=7<extra_0></think>7<extra_0>\n"
    assert scorer.render(QUESTION, STEPS) == text
    ids = torch.tensor([tokenizer.encode(text)])
    start = 1 + len("Think.\n") + 1 + len("3+4=?\n") + 1  # three role markers, one token each
    separators = [start + len("<think>3+4=7"), start + len("<think>3+4=7") + 1 + len("</think>7")]
    assert ids[0, separators].tolist() == [tokenizer.convert_tokens_to_ids("<extra_0>")] * 2
    with torch.no_grad():
        logits = scorer.model(input_ids=ids).logits[0]  # (T, 2)
    expected = [1 / (1 + math.exp(logits[t, 0] - logits[t, 1])) for t in separators]  # P(class 1)
    assert scorer.step_values([(QUESTION, STEPS)]) == [pytest.approx(expected, abs=1e-6)]
    check_aggregations(scorer, prefix, expected)


def test_sequence_classification_reward_model(policy_tokenizer, prefix, tmp_path):
    folder = tiny("LlamaForSequenceClassification", policy_tokenizer, tmp_path / "rm", num_labels=1)
    scorer = SequenceRewardScorer(folder, decode=decoder(policy_tokenizer), aggregation="min")
    ids, prompt_len = prefix
    first_step = prompt_len + len("<think>3+4=7\n")  # the prefix up to the end of step 1
    with torch.no_grad():
        logits = [scorer.model(input_ids=torch.tensor([ids[:end]])).logits[0, 0].item() for end in (first_step, len(ids))]
    expected = [1 / (1 + math.exp(-x)) for x in logits]
    check_aggregations(scorer, prefix, expected)
    assert scorer.rewards([ids[:first_step], ids]) == pytest.approx(expected, abs=1e-6)  # batched, padded

    chat = SequenceRewardScorer(folder, tokenizer=policy_tokenizer, decode=decoder(policy_tokenizer), input="chat")
    text = "<|user|>3+4=?\n<|assistant|><think>3+4=7\n</think>7\n"
    with torch.no_grad():
        logit = chat.model(input_ids=torch.tensor([policy_tokenizer.encode(text)])).logits[0, 0].item()
    assert chat.score([ids], prompt_len=prompt_len, finished=[True]) == pytest.approx([1 / (1 + math.exp(-logit))])


def test_our_token_value_critic(policy_tokenizer, prefix, tmp_path):
    from rl.critic import ValueCritic

    policy = tiny("LlamaForCausalLM", policy_tokenizer, tmp_path / "policy")
    critic = ValueCritic.from_policy(policy)
    with torch.no_grad():  # a head that says something: values spread over [0, 1] and beyond
        critic.model.score.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    scorer = TokenValueScorer(critic.model, decode=decoder(policy_tokenizer))
    ids, prompt_len = prefix
    ends = [prompt_len + len("<think>3+4=7\n") - 1, len(ids) - 1]  # the "\n" of step 1, then the EOS
    values = critic.token_values(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
    expected = values[ends].clamp(0, 1).tolist()
    assert scorer.step_values([ids], prompt_len) == [pytest.approx(expected, abs=1e-6)]
    check_aggregations(scorer, prefix, expected)
    scorer.aggregation = "last"  # then exactly the critic's own score
    assert scorer.score([ids, ids[:-3]], prompt_len=prompt_len) == pytest.approx(critic.score([ids, ids[:-3]]))


def test_load_scorer_names_the_formats(tmp_path):
    with pytest.raises(ValueError, match=r"scorer format must be one of \['likelihood', 'math_shepherd', 'qwen_prm', "
                                         r"'sequence_classification', 'value_critic'\]; got None"):
        load_scorer(tmp_path)
