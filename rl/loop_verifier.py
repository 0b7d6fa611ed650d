"""The loop's own value: a generative verifier trained only on what the search trees show.

In the RLVR setting a run has problems with checkable final answers, the cold start's gold traces at
most, and no stronger model. Every iteration the task's verifier grades each leaf's final answer; the
leaves it accepts are this verifier's training data, and the next iteration's search is valued by it:

- SFT (next-token loss on the response tokens) on the distinct verified-correct responses seen so far
  (a buffer of the newest `buffer`), `steps` AdamW steps per iteration: a generative verifier
  (Zhang et al. 2024, "Generative Verifiers") trained on the loop's own verified samples, as in
  rejection-sampling fine-tuning, but of a separate small model that then judges the policy.
- Optionally an unlikelihood term (Welleck et al. 2019, "Neural Text Generation with Unlikelihood
  Training"), -log(1 - p(y_t)), on the tokens of the steps the tree shows went wrong: a node none of whose
  leaves is correct while its parent has a correct leaf below it (Monte-Carlo Q = 0 under a parent with
  Q > 0, the tree statistic rStar-Math's step labels read).
- Optionally a filter (`min_likelihood`): a response whose final answer is right can carry a wrong step
  that a later slip cancels, and SFT on it teaches the verifier to accept that step. With the filter only
  the verified responses whose least likely token the current verifier already finds at least that
  likely join the buffer.
- It scores a prefix as `planner.LikelihoodVerifier` does: the probability of the least likely token
  the policy wrote.

It starts from a causal LM folder that reads the policy's token ids: a small LM trained on the same gold
set as the cold start (the lab's demo), or a copy of the cold start itself. No process label and no
trace beyond that folder's reaches it. `save(folder)` writes a folder that `planner.load_scorer` loads,
with the AdamW state and the buffers beside the weights, so a resumed run goes on exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from planner.likelihood import LikelihoodVerifier
from planner.prm_scorers import SCORER_FILE
from planner.tree import ROOT
from rl.batch import monte_carlo_values
from rl.config import LoopVerifierConfig
from rl.losses import masked_mean

__all__ = ["LoopVerifier", "wrong_steps"]

OPTIMIZER_FILE, BUFFERS_FILE = "loop_optimizer.pt", "loop_buffers.json"


def wrong_steps(tree) -> list[tuple[list[int], int]]:
    """(ids of the prompt and the path down to the node, where the node's own tokens start) for every node
    whose rewarded leaves are all wrong (Monte-Carlo value 0) under a parent with a correct one below it."""
    values = monte_carlo_values(tree)
    out = []
    for index in range(1, len(tree)):
        node = tree[index]
        parent = values[node.parent]
        if values[index] == 0.0 and parent is not None and parent > 0.0 and node.token_ids:
            ids = tree.prefix_ids(index)
            out.append((ids, len(ids) - len(node.token_ids)))
    return out


class LoopVerifier:
    """A small causal LM, its AdamW state and its buffers; `observe(trees)`, `train(seed)`, `scorer()`."""

    def __init__(self, config: LoopVerifierConfig, start: str | Path | None = None) -> None:
        """start: a folder `save` wrote, to resume from (its weights, AdamW state and buffers)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        folder = start or config.model
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr)
        self.correct: dict[tuple[int, ...], int] = {}  # response ids with the prompt -> where the response starts
        self.wrong: list[tuple[list[int], int]] = []
        if start is not None:
            self.optimizer.load_state_dict(torch.load(Path(start) / OPTIMIZER_FILE, weights_only=True))
            buffers = json.loads((Path(start) / BUFFERS_FILE).read_text())
            self.correct = {tuple(ids): begin for ids, begin in buffers["correct"]}
            self.wrong = [(ids, begin) for ids, begin in buffers["wrong"]]
        self.model.eval()

    def observe(self, trees) -> dict[str, float]:
        """Add the trees' verified-correct responses (reward >= 0.5) and, with an unlikelihood term, their
        wrong steps to the buffers."""
        verified: dict[tuple[int, ...], int] = {}  # this call's verified-correct responses -> where they start
        for tree in trees:
            for leaf in tree.leaves():
                node = tree[leaf]
                if leaf != ROOT and node.reward is not None and node.reward >= 0.5:
                    verified[tuple(tree.prefix_ids(leaf))] = len(tree[ROOT].token_ids)
            if self.config.unlikelihood_coef > 0:
                self.wrong.extend(wrong_steps(tree))
        kept = verified
        if self.config.min_likelihood > 0 and verified:  # a right answer may carry a wrong step: keep the plausible
            least = self.least_likely([(list(ids), start) for ids, start in verified.items()])
            kept = {ids: start for (ids, start), p in zip(verified.items(), least) if p >= self.config.min_likelihood}
        new = sum(ids not in self.correct for ids in kept)
        for ids, start in kept.items():
            self.correct.pop(ids, None)  # re-inserted as the newest
            self.correct[ids] = start
        while len(self.correct) > self.config.buffer:
            del self.correct[next(iter(self.correct))]
        self.wrong = self.wrong[-self.config.buffer:]
        return {"loop_value_new_correct": float(new), "loop_value_correct": float(len(self.correct)),
                "loop_value_filtered": float(len(verified) - len(kept)),
                "loop_value_wrong_steps": float(len(self.wrong))}

    @torch.no_grad()
    def least_likely(self, examples: list[tuple[list[int], int]]) -> list[float]:
        """Per (ids, start): the probability of the least likely token from `start` on, under the current
        weights (the value `planner.LikelihoodVerifier` gives a finished response with reduce="min")."""
        input_ids, attention, targets = self._batch(examples)
        probabilities = self._token_logprobs(input_ids, attention).exp()  # (B, T)
        return probabilities.masked_fill(targets == 0, 1.0).min(-1).values.tolist()

    def _batch(self, examples: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, target mask) (B, T): the target mask marks the tokens from `start` on."""
        width = max(len(ids) for ids, _ in examples)
        input_ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        attention, targets = torch.zeros_like(input_ids), torch.zeros((len(examples), width))
        for row, (ids, start) in enumerate(examples):  # right padding
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            targets[row, max(start, 1):len(ids)] = 1.0
        return input_ids, attention, targets

    def _token_logprobs(self, input_ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """(B, T) log p(token t | tokens before it), 0 at t = 0."""
        logits = self.model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()  # (B, T-1, V)
        chosen = torch.log_softmax(logits, -1).gather(-1, input_ids[:, 1:, None])[..., 0]  # (B, T-1)
        return torch.nn.functional.pad(chosen, (1, 0))  # (B, T)

    def train(self, seed: int) -> dict[str, float]:
        """`config.steps` AdamW steps on the buffers (nothing while no response has been verified)."""
        c = self.config
        if not self.correct:
            return {"loop_value_loss": float("nan")}
        rng = np.random.default_rng(seed)
        correct = [(list(ids), start) for ids, start in self.correct.items()]
        losses = []
        self.model.train()
        for _ in range(c.steps):
            picked = [correct[i] for i in rng.integers(len(correct), size=c.batch_size)]
            input_ids, attention, targets = self._batch(picked)
            nll = -masked_mean(self._token_logprobs(input_ids, attention), targets)  # ()
            loss = nll
            if c.unlikelihood_coef > 0 and self.wrong:
                picked = [self.wrong[i] for i in rng.integers(len(self.wrong), size=c.batch_size)]
                input_ids, attention, targets = self._batch(picked)
                p = self._token_logprobs(input_ids, attention).exp().clamp(max=1 - 1e-6)  # (B, T)
                unlikelihood = -masked_mean(torch.log1p(-p), targets)  # ()
                loss = nll + c.unlikelihood_coef * unlikelihood
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(float(nll.detach()))
        self.model.eval()
        return {"loop_value_loss": float(np.mean(losses))}

    def scorer(self) -> LikelihoodVerifier:
        """The verifier as a search scorer, on the current weights."""
        return LikelihoodVerifier(self.model, reduce=self.config.reduce)

    def save(self, folder: str | Path) -> Path:
        """A folder `planner.load_scorer` loads (the model, its tokenizer and scorer.json), written beside and
        then renamed into place."""
        folder = Path(folder)
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp, safe_serialization=True)
        self.tokenizer.save_pretrained(tmp)
        (tmp / SCORER_FILE).write_text(json.dumps({"format": LikelihoodVerifier.format, "reduce": self.config.reduce}))
        torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        buffers = {"correct": [[list(ids), begin] for ids, begin in self.correct.items()],
                   "wrong": [[ids, begin] for ids, begin in self.wrong]}
        (tmp / BUFFERS_FILE).write_text(json.dumps(buffers))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        return folder
