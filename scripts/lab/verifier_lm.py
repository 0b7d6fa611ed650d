"""Train the generative verifier of the embedded task: a separate small LM that judges the policy's steps.

A value head on the policy's own trunk cannot rank sibling steps much better than the policy's own
confidence (about 0.75-0.80 on held-out siblings, docs/results.md): the steps the policy gets wrong,
such as "4+7=10", are the ones its trunk is unsure of. A verifier must know more than the policy.
This one is a separate, much smaller model (a Llama of the cold start's kind, a thirtieth of
its parameters) trained on the same gold traces, but to convergence instead of stopped at partial skill,
and it judges a response by how likely it finds every token the policy wrote
(`planner.likelihood.LikelihoodVerifier`): a generative verifier in the sense of Zhang et al. 2024
("Generative Verifiers: Reward Modeling as Next-Token Prediction"), read as the probability of the
least likely token (one slipped digit is enough to reject a response).

The folder it writes is the cold start's (model, char tokenizer, chat template, sft_history.json)
plus `scorer.json`, so `planner.prm_scorers.load_scorer(folder)`, `scripts/scaling.py --scorer
folder` and `scripts/value_eval.py --verifier folder` load it as a scorer.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from lab.cold_start import COLD_START_SFT, GOLD_BUDGET_SFT, ColdStartResult, cold_start

__all__ = ["VERIFIER_SFT", "train_verifier_lm"]

VERIFIER_SFT = replace(COLD_START_SFT, max_steps=3000, eval_every=250)
"""The cold start's recipe (AdamW lr 3e-3, batch 32, cosine) over up to 3,000 steps instead of 700. The
default verifier (hidden 32, 2 layers: 35k parameters, a thirtieth of the policy's 1.06M) reached a
sampled pass@1 of 0.99 on the held-out problems in 3,000 steps, 56 s on one core (docs/results.md)."""


def train_verifier_lm(output_dir: str | os.PathLike, *, target_pass: float | None = 0.97,
                      num_train: int = 20_000, difficulty: str = "medium", max_minutes: float = 10.0,
                      eval_problems: int = 256, reduce: str = "min", hidden_size: int = 32, num_layers: int = 2,
                      num_heads: int = 2, max_steps: int | None = None, seed: int = 0,
                      progress: bool = True) -> ColdStartResult:
    """SFT a verifier LM on the gold traces of `num_train` problems until its sampled pass@1 on
    `eval_problems` validation problems reaches `target_pass` (None: to its best validation pass@1, early
    stopping as the cold start's), or `max_steps` (default `VERIFIER_SFT.max_steps`), or `max_minutes` (a
    bound for a stuck run); then note the scorer format (`reduce`: "min" or "mean" over the response's
    token probabilities) in the folder's scorer.json. The default, 20,000 problems to 0.97, is the
    teacher of docs/results.md; the RLVR demo gives it the cold start's gold budget instead. The model's
    size (`hidden_size`, `num_layers`, `num_heads`) sets what each scored token costs, 2 x its parameters
    FLOPs."""
    from planner.likelihood import LikelihoodVerifier
    from planner.prm_scorers import SCORER_FILE

    if reduce not in LikelihoodVerifier.REDUCTIONS:
        raise ValueError(f"reduce must be one of {list(LikelihoodVerifier.REDUCTIONS)}; got {reduce!r}")
    if target_pass is not None and not 0.0 < target_pass <= 1.0:
        raise ValueError(f"target_pass must be None or in (0, 1]; got {target_pass!r}")
    config = VERIFIER_SFT if target_pass is not None else replace(GOLD_BUDGET_SFT, max_steps=VERIFIER_SFT.max_steps)
    config = config if max_steps is None else replace(config, max_steps=max_steps)
    result = cold_start(output_dir, config=config, target_pass_range=None if target_pass is None else (target_pass, 1.0),
                        max_minutes=max_minutes, num_train=num_train, difficulty=difficulty,
                        eval_problems=eval_problems, hidden_size=hidden_size, num_layers=num_layers,
                        num_heads=num_heads, final_eval=False, seed=seed, progress=progress)
    note = {"format": LikelihoodVerifier.format, "reduce": reduce}
    (Path(output_dir) / SCORER_FILE).write_text(json.dumps(note))
    return result
