"""Many searches over one engine: each runs in its own thread with its own `SearchView` of the shared
policy, and every round their requests are merged: generate calls into one engine call per sampling
shape, and calls of a model scorer into one batched forward pass.

    results = run_interleaved([functools.partial(search, problem=p) for p in problems], policy, max_live=64)

Used by `planner.solve.solve_batch(batched=True)` and by the learner's tree growing.

The schedule, in rounds. The jobs run cooperatively, one at a time: each live job whose last request
was answered (or that has just started) runs, in job order, until it makes its next request or ends.
With `max_live=K`, at most K jobs are live: a slot freed by a job that ended goes at once to the next
job of the list (continuous refilling), which runs to its first request in the same round, so the
engine is not left waiting on the searches that happen to be slow. Then every pending request is
answered, one merged call per kind of request (in the order of each kind's first job):

- generate calls of one sampling shape (same max_tokens, stop, temperature, ...; n may differ): one
  `policy.generate` over all their prompts, in job order, with a seed derived from the jobs' own seeds
  (a lone call keeps its own; `_Rendezvous.generate_merged` says how calls of different n merge);
- calls of one scorer that `merges_calls` (a `ModelScorer` or the learner's `ValueCritic`): one
  batched forward over all their prefixes (`Scorer._score_merged`). A job gets its scorer through
  `scorer_for_search(scorer, view)`, which routes the scorer's calls through the view.

The schedule depends on nothing but the jobs, so the outcome is deterministic. What a merged generate
call gives a search depends on which searches share it (its seed comes from all of theirs, and a
backend batches the prompts together): with refilling (or another `max_live`) a search gets other
samples, and so another tree, unless its samples are a function of its own requests alone (a scripted
policy; tests/test_scheduler.py shows each problem then gets the tree it gets without refilling).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.policy.base import NamedTensors, Policy
from planner.policy.types import ComputeStats, SamplingParams
from planner.scorers import Scorer

__all__ = ["SearchView", "run_interleaved", "scorer_for_search"]


@dataclass
class _Request:
    """One job's request: answered together with the other jobs' requests of the same `key`."""

    key: Hashable
    payload: object
    answer: Callable[[list], list]
    """payloads (in job order) -> one reply per payload; runs once per round per key."""


class SearchView(Policy):
    """One search's policy: a `Policy` whose samples come from the merged calls of a shared engine.

    `Policy.generate` runs as for any policy (the same validation, in the search's own thread, and
    the same accounting into this view's own `stats`): prompt and generated tokens are this search's
    exactly, prompt-cache hits of a merged call are shared out in proportion to prompt tokens, and
    `stats.seconds` is the time this search waited for its samples. A call without a seed draws one
    from the view's own generator (seeded by the job's index), so the outcome stays deterministic.
    """

    def __init__(self, rendezvous: "_Rendezvous", index: int) -> None:
        super().__init__(seed=index)
        self._rendezvous, self._index = rendezvous, index
        self.shared_policy = rendezvous.policy
        """The engine this view serves from (`scorer_for_search` rebinds rollout scorers to the view)."""
        self.backend = self.shared_policy.backend
        self.model_path = self.shared_policy.model_path
        self.tokenizer = self.shared_policy.tokenizer
        self.num_parameters = self.shared_policy.num_parameters
        self.context_length = self.shared_policy.context_length

    @property
    def eos_token_ids(self) -> set[int]:
        return self.shared_policy.eos_token_ids

    def encode(self, text: str) -> list[int]:
        return self.shared_policy.encode(text)

    def encode_prompt(self, problem: str, chat: bool = True, system: str | None = None, prefill: str = "") -> list[int]:
        return self.shared_policy.encode_prompt(problem, chat=chat, system=system, prefill=prefill)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.shared_policy.decode(token_ids)

    def _generate(self, prompts, params, seed):
        request = _Request(("generate", params.replace(seed=None, n=1)), (prompts, params.replace(seed=seed)),
                           self._rendezvous.generate_merged)
        return self._rendezvous.wait_for(self._index, request)

    def merged_call(self, key: Hashable, payload, answer: Callable[[list], list]):
        """This search's reply to `payload`, answered at the end of the round together with every other
        search's payload of the same `key`: `answer(payloads)` runs once over all of them, in job order,
        and returns one reply per payload. How a scorer's calls are merged (`scorer_for_search`)."""
        return self._rendezvous.wait_for(self._index, _Request(key, payload, answer))

    def load_weights(self, named_tensors: NamedTensors) -> None:
        raise TypeError("a search's view of a shared engine cannot load weights: call load_weights on the shared "
                        "policy (SearchView.shared_policy) between searches")


def scorer_for_search(scorer: Scorer, view: SearchView) -> Scorer:
    """`scorer` for the one search that `view` serves (`planner.solve.solve_batch`, the learner): a shallow
    copy with its own `stats` (and, once `reset`, its own per-search state), so that each search's compute
    counts only its own scoring. A scorer that samples from the shared engine (its `policy` is
    `view.shared_policy`: a `MonteCarloScorer`) samples through the view instead, so its rollouts join the
    merged engine calls and count in this search's generated tokens. A scorer that `merges_calls` has the
    copy's calls answered together with the other searches' calls of the round, in one `_score_merged` of
    the original scorer; the copy still counts its own calls and tokens."""
    twin = copy.copy(scorer)
    twin.stats = ComputeStats()
    if getattr(scorer, "policy", None) is view.shared_policy:
        twin.policy = view
    merged = scorer.__dict__.get("_score")  # a `_MergedScore` when `scorer` is itself another search's copy
    if scorer.merges_calls:
        twin._score = _MergedScore(view, merged.origin if isinstance(merged, _MergedScore) else scorer)
    return twin


class _MergedScore:
    """A search's copy's `_score` when its scorer `merges_calls`: the call waits for the end of the round and
    is answered by one `origin._score_merged` over every search's call of that round."""

    def __init__(self, view: SearchView, origin: Scorer) -> None:
        self.view, self.origin = view, origin

    def __call__(self, prefixes: list[list[int]], prompt_len: int | None, finished: list[bool]) -> list[float]:
        return self.view.merged_call(("score", self.origin), (prefixes, prompt_len, finished),
                                     self.origin._score_merged)


class _Rendezvous:
    """Where the jobs' threads meet the scheduler: a request waits until the round's merged calls have run."""

    def __init__(self, policy: Policy, count: int) -> None:
        self.policy = policy
        self.go = [threading.Event() for _ in range(count)]
        self.back = threading.Event()
        self.requests: list[_Request | None] = [None] * count
        self.replies: list = [None] * count

    def wait_for(self, index: int, request: _Request):
        """Job `index`'s reply to `request` (raised if it is an error), once the merged call has run."""
        self.requests[index] = request
        self.back.set()
        self.go[index].wait()
        self.go[index].clear()
        reply, self.replies[index] = self.replies[index], None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def step(self, index: int) -> None:
        """Let job `index` run until it makes a request or ends."""
        self.go[index].set()
        self.back.wait()
        self.back.clear()

    def answer(self, waiting: Sequence[int]) -> None:
        """Answer the pending requests of the jobs `waiting`: one merged call per key."""
        groups: dict[Hashable, list[int]] = {}
        for i in sorted(waiting):
            groups.setdefault(self.requests[i].key, []).append(i)
        for members in groups.values():
            try:
                replies = self.requests[members[0]].answer([self.requests[i].payload for i in members])
            except Exception as error:  # noqa: BLE001 - every job in the call gets the error
                replies = [error] * len(members)
            for i, reply in zip(members, replies):
                self.replies[i] = reply
        for i in waiting:
            self.requests[i] = None

    def generate_merged(self, payloads: list[tuple[list[list[int]], SamplingParams]]) -> list:
        """One `policy.generate` over the prompts of several generate calls whose settings differ at most
        in n: per call, (its samples per prompt, its share of the cached prompt tokens).

        Calls that share n go side by side with that n. Calls of different n (a beam search's first
        round of N samples beside other searches' rounds of M) send each prompt n times with n=1: the
        same work on both backends (vLLM fans n out into n requests of one prompt; the transformers
        backend prefills a repeated prompt once). A search still counts each of its prompts once, as
        for its own call; its cached prompt tokens are then the engine's average over the copies.
        """
        seeds = [params.seed for _, params in payloads]
        # one search's call keeps its own seed (max_live=1 is `solve` exactly); several share a derived one
        seed = seeds[0] if len(seeds) == 1 else int(np.random.SeedSequence(seeds).generate_state(1)[0]) % (2**31 - 1)
        side_by_side = len({params.n for _, params in payloads}) == 1
        copies = [1 if side_by_side else params.n for _, params in payloads]
        prompts = [p for (own, _), k in zip(payloads, copies) for p in own for _ in range(k)]
        shape = payloads[0][1].replace(seed=seed, **({} if side_by_side else {"n": 1}))
        before = self.policy.stats.copy()
        groups = self.policy.generate(prompts, shape)
        spent = self.policy.stats - before
        sent = sum(len(p) for p in prompts)
        replies, start, shared_cached = [], 0, 0
        for index, ((own, _), k) in enumerate(zip(payloads, copies)):
            mine = groups[start:start + k * len(own)]
            start += k * len(own)
            last = side_by_side and index == len(payloads) - 1  # the remainder: shares add up to the call's
            cached = (spent.cached_prompt_tokens - shared_cached if last else
                      spent.cached_prompt_tokens * sum(len(p) for p in own) // max(1, sent))
            shared_cached += cached
            replies.append(([[s for group in mine[j * k:(j + 1) * k] for s in group] for j in range(len(own))],
                            cached))
        return replies


def run_interleaved(jobs: Sequence[Callable[[SearchView], object]], policy: Policy, *,
                    max_live: int | None = None) -> list:
    """Run `job(view)` for each job, each with its own `SearchView` of `policy`, merging their requests;
    results in job order. max_live: the most jobs live at once (None: all); a job that ends hands its
    slot to the next one in the list. The first error any job raised is raised once all jobs have ended."""
    count = len(jobs)
    if max_live is None:
        max_live = max(1, count)
    if not isinstance(max_live, int) or isinstance(max_live, bool) or max_live < 1:
        raise ValueError(f"max_live must be an integer >= 1 or None (all jobs live); got {max_live!r}")
    rendezvous = _Rendezvous(policy, count)
    results: list = [None] * count
    errors: list[BaseException | None] = [None] * count
    done = [False] * count

    def work(i: int, view: SearchView) -> None:
        rendezvous.go[i].wait()
        rendezvous.go[i].clear()
        try:
            results[i] = jobs[i](view)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            errors[i] = error
        finally:
            done[i] = True
            rendezvous.back.set()

    threads: list[threading.Thread] = []
    live: list[int] = []
    while True:
        for i in live:  # one at a time, in order: each runs until it asks again or ends
            rendezvous.step(i)
        live = [i for i in live if not done[i]]
        while len(live) < max_live and len(threads) < count:  # refill: the next jobs of the list start now
            i = len(threads)
            threads.append(threading.Thread(target=work, args=(i, SearchView(rendezvous, i)), daemon=True,
                                            name=f"search-{i}"))
            threads[i].start()
            rendezvous.step(i)
            if not done[i]:
                live.append(i)
        if not live:
            break
        rendezvous.answer(live)
    for t in threads:
        t.join()
    for error in errors:
        if error is not None:
            raise error
    return results
