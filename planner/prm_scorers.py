"""Reward models in the formats people publish them in, as planner scorers (docs/prm_formats.md).

Every class keeps the `planner.scorers.Scorer` contract, `score(prefixes, *, prompt_len, finished) ->
list[float]` in [0, 1]: a prefix (prompt ids + response ids so far) gets one value per step of its
response, and the per-step values become one value by an aggregation of `planner.scorers.AGGREGATIONS`
(last, min, product, mean). Steps are the pieces of the response text between `step_delimiter`s (an
empty last piece, after a trailing delimiter, is not a step); a response with no step yet gets
`empty_value`.

Formats:
- `MathShepherdScorer` (Wang et al. 2024, Math-Shepherd): a causal LM; the input is the question, a
  space, then the steps joined by newlines, each followed by " " and a step tag token; a step's value is
  softmax(logit[good], logit[bad])[good] at its tag's position.
- `QwenPRMScorer` (Qwen2.5-Math-PRM, Zhang et al. 2025): a token-classification model with 2 classes;
  the input is the model's chat template with a system prompt, the question as the user turn and the
  steps each followed by a separator token as the assistant turn; a step's value is softmax(logits)[1]
  at its separator.
- `SequenceRewardScorer`: a plain sequence-classification reward model (one logit per sequence, as
  Skywork-Reward or our outcome reward model `rl.reward_model`); a step's value is the model's value of
  the response up to the end of that step (only the whole prefix with "last").
- `TokenValueScorer`: our own token-classification critic (`rl.critic.ValueCritic`); a step's value is
  the critic's value at the step's last token (with "last", exactly `ValueCritic.score`).
- `LikelihoodVerifier` (planner/likelihood.py): a generative verifier, a causal LM sharing the policy's
  tokenizer; a prefix's value is the probability of the least likely response token under it.

The text formats need the prompt's question and the response's text: `decode` (the policy's
`Policy.decode`) turns ids into text and `question_of(prompt_text)` finds the question in the decoded
prompt (default: the decoded prompt, stripped; the policy's chat template markers are special tokens
that decoding drops).
"""

from __future__ import annotations

import json
import os
from abc import abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path

from planner.likelihood import LikelihoodVerifier
from planner.scorers import AGGREGATIONS, ModelScorer, Scorer, aggregate

__all__ = ["StepTextScorer", "MathShepherdScorer", "QwenPRMScorer", "SequenceRewardScorer", "TokenValueScorer",
           "PRM_FORMATS", "SCORER_FILE", "load_scorer", "split_steps", "step_ends", "token_id"]

SCORER_FILE = "scorer.json"
"""A model folder's note of the scorer format it loads as (`load_scorer`): {"format": ..., options}."""
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
"""The system prompt of Qwen2.5-Math-PRM's model card."""


def split_steps(text: str, delimiter: str) -> list[str]:
    """The steps of a response: the pieces between delimiters, without an empty last piece."""
    pieces = text.split(delimiter)
    return pieces[:-1] if pieces and pieces[-1] == "" else pieces


def step_ends(response_ids: Sequence[int], decode: Callable[[list[int]], str], delimiter: str) -> list[int]:
    """Index (in `response_ids`) of the last token of every step: each token whose text holds the
    delimiter, and the last token (the step being written, or the answer)."""
    ends = [j for j, t in enumerate(response_ids) if delimiter in decode([t])]
    if response_ids and (not ends or ends[-1] != len(response_ids) - 1):
        ends.append(len(response_ids) - 1)
    return ends


def token_id(tokenizer, token: str | int, owner: str, name: str) -> int:
    """The id of `token`: an id as given, else a vocabulary entry, else text that encodes to one token.
    Raises one clear error when the tokenizer has no such token."""
    if isinstance(token, int):
        if not 0 <= token < len(tokenizer):
            raise ValueError(f"{owner}.{name} id {token} is outside the tokenizer's vocabulary [0, {len(tokenizer)})")
        return token
    vocab = tokenizer.get_vocab()
    if token in vocab:
        return vocab[token]
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) == 1:
        return ids[0]
    raise ValueError(f"{owner}.{name} {token!r} is not a token of this tokenizer (it encodes to {len(ids)} ids "
                     f"{ids[:8]}): pass the token the reward model was trained with (one vocabulary entry, or "
                     "its id), or add it to the tokenizer and the model before training")


def _load(model, loader: str, **kwargs):
    if isinstance(model, (str, os.PathLike)):
        import transformers

        if not (Path(model) / "config.json").is_file():
            raise FileNotFoundError(f"no model folder at {str(model)!r} (expected a config.json there)")
        return getattr(transformers, loader).from_pretrained(model, **kwargs)
    return model


def _tokenizer(model, tokenizer):
    if tokenizer is not None:
        return tokenizer
    if isinstance(model, (str, os.PathLike)):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model)
    raise ValueError("pass tokenizer= along with an in-memory model")


class StepTextScorer(Scorer):
    """A reward model that reads text: the question and the response's steps, rendered in its format."""

    format = ""

    def __init__(self, model, tokenizer, *, decode: Callable[[list[int]], str],
                 question_of: Callable[[str], str] | None = None, step_delimiter: str = "\n",
                 aggregation: str = "min", batch_size: int = 8, device: str | None = None,
                 empty_value: float = 0.5) -> None:
        super().__init__()
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {sorted(AGGREGATIONS)}; got {aggregation!r}")
        if not step_delimiter:
            raise ValueError("step_delimiter must be a non-empty string, e.g. '\\n'")
        if not 0 <= empty_value <= 1:
            raise ValueError(f"empty_value must be in [0, 1]; got {empty_value!r}")
        self.model = model.to(device) if device else model
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.tokenizer, self.decode = tokenizer, decode
        self.question_of = question_of or (lambda text: text.strip())
        self.step_delimiter, self.aggregation, self.batch_size = step_delimiter, aggregation, batch_size
        self.empty_value = empty_value
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def _score(self, prefixes, prompt_len, finished):
        if prompt_len is None:
            raise ValueError(f"{type(self).__name__} reads the question and the response apart: pass prompt_len")
        items = [(self.question_of(self.decode(p[:prompt_len])), split_steps(self.decode(p[prompt_len:]),
                                                                              self.step_delimiter)) for p in prefixes]
        values = [self.empty_value] * len(items)
        todo = [k for k, (_, steps) in enumerate(items) if steps]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            for k, step_values in zip(chunk, self.step_values([items[k] for k in chunk])):
                values[k] = aggregate(step_values, self.aggregation)
        return values

    @abstractmethod
    def step_values(self, items: Sequence[tuple[str, list[str]]]) -> list[list[float]]:
        """Per (question, steps) item, one value in [0, 1] per step."""

    def _forward(self, texts: list[str]):
        """(input_ids (B, T), outputs' logits (B, T, ...)) of the texts, right-padded."""
        import torch

        encoded = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=True)
        input_ids = encoded["input_ids"].to(self.device)
        with torch.no_grad():
            out = self.model(input_ids=input_ids, attention_mask=encoded["attention_mask"].to(self.device))
        logits = out.logits if hasattr(out, "logits") else out[0]
        return input_ids, logits.float()

    def _values_at(self, input_ids, per_position, marker: int, items) -> list[list[float]]:
        """per_position (B, T) read where input_ids == marker; one value per step, checked."""
        out = []
        for b, (_, steps) in enumerate(items):
            found = per_position[b][input_ids[b] == marker].tolist()
            if len(found) != len(steps):
                raise ValueError(f"{type(self).__name__}: the rendered input holds {len(found)} marker tokens "
                                 f"(id {marker}) for {len(steps)} steps: the marker merges with the text around it "
                                 "in this tokenizer, or the text already contains it")
            out.append(found)
        return out


class MathShepherdScorer(StepTextScorer):
    """Math-Shepherd PRM (Wang et al. 2024): step tags, value from the "good"/"bad" token logits."""

    format = "math_shepherd"

    def __init__(self, model, tokenizer=None, *, step_tag: str | int = "ки", good_token: str | int = "+",
                 bad_token: str | int = "-", **options) -> None:
        tokenizer = _tokenizer(model, tokenizer)
        self.tag_id = token_id(tokenizer, step_tag, "MathShepherdScorer", "step_tag")
        self.good_id = token_id(tokenizer, good_token, "MathShepherdScorer", "good_token")
        self.bad_id = token_id(tokenizer, bad_token, "MathShepherdScorer", "bad_token")
        self.step_tag = tokenizer.convert_ids_to_tokens(self.tag_id) if isinstance(step_tag, int) else step_tag
        super().__init__(_load(model, "AutoModelForCausalLM"), tokenizer, **options)

    def render(self, question: str, steps: Sequence[str]) -> str:
        """`{question} {step 1} {tag}\\n{step 2} {tag}...` (the model card's input)."""
        return f"{question} " + "\n".join(f"{step} {self.step_tag}" for step in steps)

    def step_values(self, items):
        input_ids, logits = self._forward([self.render(q, steps) for q, steps in items])  # (B, T), (B, T, V)
        good = logits[..., [self.good_id, self.bad_id]].softmax(-1)[..., 0]  # (B, T): P(good) at every position
        return self._values_at(input_ids, good, self.tag_id, items)


class QwenPRMScorer(StepTextScorer):
    """Qwen2.5-Math-PRM style: a separator token after each step, a 2-class head, P(positive) there."""

    format = "qwen_prm"

    def __init__(self, model, tokenizer=None, *, separator: str | int = "<extra_0>",
                 system_prompt: str | None = QWEN_PRM_SYSTEM, **options) -> None:
        tokenizer = _tokenizer(model, tokenizer)
        self.separator_id = token_id(tokenizer, separator, "QwenPRMScorer", "separator")
        self.separator = tokenizer.convert_ids_to_tokens(self.separator_id)
        self.system_prompt = system_prompt
        super().__init__(_load(model, "AutoModelForTokenClassification", num_labels=2), tokenizer, **options)

    def render(self, question: str, steps: Sequence[str]) -> str:
        """The chat template over [system, user = question, assistant = each step + separator]."""
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": question},
            {"role": "assistant", "content": "".join(step + self.separator for step in steps)}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)

    def step_values(self, items):
        input_ids, logits = self._forward([self.render(q, steps) for q, steps in items])  # (B, T), (B, T, 2)
        positive = logits.softmax(-1)[..., 1]  # (B, T)
        return self._values_at(input_ids, positive, self.separator_id, items)


class SequenceRewardScorer(Scorer):
    """A sequence-classification reward model (one logit per sequence), squashed to [0, 1] by a sigmoid.

    input "ids": the prefix ids as sampled (a model trained on the policy's own tokens, as
    `rl.reward_model` trains one); "chat": the question and response text through the reward model's
    chat template (user = question, assistant = response), for models with their own tokenizer.
    """

    format = "sequence_classification"

    def __init__(self, model, tokenizer=None, *, decode: Callable[[list[int]], str] | None = None,
                 input: str = "ids", question_of: Callable[[str], str] | None = None, step_delimiter: str = "\n",
                 aggregation: str = "last", batch_size: int = 16, device: str | None = None) -> None:
        super().__init__()
        if input not in ("ids", "chat"):
            raise ValueError(f"input must be one of ['chat', 'ids']; got {input!r}")
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {sorted(AGGREGATIONS)}; got {aggregation!r}")
        if decode is None and (input == "chat" or aggregation != "last"):
            raise ValueError("decode= (the policy's Policy.decode) is needed to read steps or text")
        self.tokenizer = _tokenizer(model, tokenizer) if input == "chat" else tokenizer
        self.model = _load(model, "AutoModelForSequenceClassification", num_labels=1)
        self.model = (self.model.to(device) if device else self.model).eval()
        self.device = next(self.model.parameters()).device
        self.pad_token_id = getattr(self.model.config, "pad_token_id", None) or 0
        self.decode, self.input, self.step_delimiter = decode, input, step_delimiter
        self.question_of = question_of or (lambda text: text.strip())
        self.aggregation, self.batch_size = aggregation, batch_size
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def _pieces(self, prefix: list[int], prompt_len: int) -> list[list[int] | str]:
        """The sequences whose values are the prefix's step values (only the whole prefix with "last")."""
        response = prefix[prompt_len:]
        ends = [len(response) - 1] if self.aggregation == "last" else step_ends(response, self.decode,
                                                                                  self.step_delimiter)
        if self.input == "ids":
            return [prefix[:prompt_len + end + 1] for end in ends] or [prefix]
        question = self.question_of(self.decode(prefix[:prompt_len]))
        messages = lambda text: [{"role": "user", "content": question}, {"role": "assistant", "content": text}]  # noqa: E731
        return [self.tokenizer.apply_chat_template(messages(self.decode(response[:end + 1])), tokenize=False)
                for end in ends] or [self.tokenizer.apply_chat_template(messages(""), tokenize=False)]

    def rewards(self, sequences: list) -> list[float]:
        """The reward model's value in [0, 1] of each sequence (token-id lists, or texts with input "chat")."""
        import torch

        values = []
        for start in range(0, len(sequences), self.batch_size):
            chunk = sequences[start:start + self.batch_size]
            if self.input == "chat":
                encoded = self.tokenizer(chunk, return_tensors="pt", padding=True)
                ids, mask = encoded["input_ids"], encoded["attention_mask"]
            else:
                width = max(len(s) for s in chunk)
                ids = torch.tensor([s + [self.pad_token_id] * (width - len(s)) for s in chunk])
                mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in chunk])
            with torch.no_grad():
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            values += torch.sigmoid(logits.float()[:, 0]).tolist()  # (b,)
        return values

    def _score(self, prefixes, prompt_len, finished):
        if prompt_len is None:
            raise ValueError("SequenceRewardScorer needs prompt_len to find the response")
        pieces = [self._pieces(p, prompt_len) for p in prefixes]
        flat = self.rewards([s for group in pieces for s in group])
        out, k = [], 0
        for group in pieces:
            out.append(aggregate(flat[k:k + len(group)], self.aggregation))
            k += len(group)
        return out


class TokenValueScorer(ModelScorer):
    """A one-label token-classification critic read at the end of every step (`rl.critic.ValueCritic`'s
    model; "clamp" for a critic regressed on values in [0, 1], "sigmoid" for a head trained with BCE)."""

    format = "value_critic"

    def __init__(self, model, *, decode: Callable[[list[int]], str], step_delimiter: str = "\n",
                 aggregation: str = "last", squash: str = "clamp", batch_size: int = 16,
                 device: str | None = None) -> None:
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {sorted(AGGREGATIONS)}; got {aggregation!r}")
        super().__init__(model, squash=squash, padding_side="right", batch_size=batch_size, device=device)
        self.decode, self.step_delimiter, self.aggregation = decode, step_delimiter, aggregation

    def step_values(self, prefixes: Sequence[Sequence[int]], prompt_len: int) -> list[list[float]]:
        """Per prefix, the squashed value at each step's last token (the prompt's last token when the
        response is empty)."""
        out = []
        for start in range(0, len(prefixes), self.batch_size):
            batch = [list(p) for p in prefixes[start:start + self.batch_size]]
            logits, _ = self._head_outputs(batch)  # (B, T)
            for b, prefix in enumerate(batch):
                ends = [prompt_len + j for j in step_ends(prefix[prompt_len:], self.decode, self.step_delimiter)]
                out.append(self._squash(logits[b, ends or [len(prefix) - 1]]).tolist())
        return out

    def _score(self, prefixes, prompt_len, finished):
        if prompt_len is None:
            raise ValueError("TokenValueScorer needs prompt_len to find the response's steps")
        return [aggregate(v, self.aggregation) for v in self.step_values(prefixes, prompt_len)]


PRM_FORMATS: dict[str, type[Scorer]] = {
    MathShepherdScorer.format: MathShepherdScorer,
    QwenPRMScorer.format: QwenPRMScorer,
    SequenceRewardScorer.format: SequenceRewardScorer,
    TokenValueScorer.format: TokenValueScorer,
    LikelihoodVerifier.format: LikelihoodVerifier,
}
"""Format name -> scorer class."""


def load_scorer(folder: str | os.PathLike, *, format: str | None = None, **options) -> Scorer:
    """The scorer of a model folder: its `scorer.json` names the format and default options (written by
    `rl.reward_model`), or pass `format=` (one of PRM_FORMATS); `options` override and add to them
    (`decode=` the policy's decode for the text formats)."""
    note = Path(folder) / SCORER_FILE
    saved = json.loads(note.read_text()) if note.is_file() else {}
    name = format or saved.pop("format", None)
    saved.pop("format", None)
    if name not in PRM_FORMATS:
        raise ValueError(f"scorer format must be one of {sorted(PRM_FORMATS)}; got {name!r} (pass format= or "
                         f"write {SCORER_FILE} in {str(folder)!r})")
    return PRM_FORMATS[name](str(folder), **{**saved, **options})
