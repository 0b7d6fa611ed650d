"""Many searches over one engine: each runs in its own thread with its own `SearchView` of the shared
policy, and every round their generate calls are merged into one engine call per sampling shape.

    results = run_interleaved([functools.partial(search, problem=p) for p in problems], policy)

Used by `planner.solve.solve_batch(batched=True)` and by the learner's tree growing. The jobs run
cooperatively, one at a time: a job runs until it asks for samples or ends; once every live job
waits, the pending requests are answered with one `policy.generate` per sampling shape (same n,
max_tokens, stop, ...), in job order. The schedule depends on nothing but the jobs, so the outcome
is deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from planner.policy.base import NamedTensors, Policy
from planner.policy.types import SamplingParams

__all__ = ["SearchView", "run_interleaved"]


class SearchView(Policy):
    """One search's policy: a `Policy` whose samples come from the merged calls of a shared engine.

    `Policy.generate` runs as for any policy (the same validation, in the search's own thread, and
    the same accounting into this view's own `stats`): prompt and generated tokens are this search's
    exactly, prompt-cache hits of a merged call are shared out in proportion to prompt tokens, and
    `stats.seconds` is the time this search waited for its samples. A call without a seed draws one
    from the view's own generator (seeded by the job's index), so the outcome stays deterministic.
    """

    def __init__(self, calls: "_MergedCalls", index: int) -> None:
        super().__init__(seed=index)
        self._calls, self._index = calls, index
        self.shared_policy = calls.policy
        """The engine this view serves from (`Scorer.for_search` rebinds rollout scorers to the view)."""
        self.backend = self.shared_policy.backend
        self.model_path = self.shared_policy.model_path
        self.tokenizer = self.shared_policy.tokenizer
        self.num_parameters = self.shared_policy.num_parameters

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
        return self._calls.wait_for(self._index, prompts, params.replace(seed=seed))

    def load_weights(self, named_tensors: NamedTensors) -> None:
        raise TypeError("a search's view of a shared engine cannot load weights: call load_weights on the shared "
                        "policy (SearchView.shared_policy) between searches")


class _MergedCalls:
    """The rendezvous of the jobs' threads: each request waits until the scheduler answers all pending
    requests with one generate call per sampling shape."""

    def __init__(self, policy: Policy, count: int) -> None:
        self.policy = policy
        self.go = [threading.Event() for _ in range(count)]
        self.back = threading.Event()
        self.requests: list[tuple[list[list[int]], SamplingParams] | None] = [None] * count
        self.replies: list = [None] * count

    def wait_for(self, index: int, prompts, params: SamplingParams):
        """(samples per prompt, cached prompt tokens) for job `index`, once the merged call has run."""
        self.requests[index] = (prompts, params)
        self.back.set()
        self.go[index].wait()
        self.go[index].clear()
        reply, self.replies[index] = self.replies[index], None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def answer(self, waiting: list[int]) -> None:
        shapes: dict[SamplingParams, list[int]] = {}
        for i in waiting:
            shapes.setdefault(self.requests[i][1].replace(seed=None), []).append(i)
        for shape, members in shapes.items():
            seeds = [self.requests[i][1].seed for i in members]
            seed = int(np.random.SeedSequence(seeds).generate_state(1)[0]) % (2**31 - 1)
            prompts = [p for i in members for p in self.requests[i][0]]
            before = self.policy.stats.copy()
            try:
                groups = self.policy.generate(prompts, shape.replace(seed=seed))
            except Exception as error:  # noqa: BLE001 - every search in the call gets the error
                for i in members:
                    self.replies[i] = error
                continue
            spent = self.policy.stats - before
            start, shared_cached = 0, 0
            for k, i in enumerate(members):
                own = self.requests[i][0]
                own_tokens = sum(len(p) for p in own)
                cached = (spent.cached_prompt_tokens - shared_cached if k == len(members) - 1 else
                          spent.cached_prompt_tokens * own_tokens // max(1, spent.prompt_tokens))
                shared_cached += cached
                self.replies[i] = (groups[start:start + len(own)], cached)
                start += len(own)
        for i in waiting:
            self.requests[i] = None


def run_interleaved(jobs: Sequence[Callable[[SearchView], object]], policy: Policy) -> list:
    """Run `job(view)` for each job, each with its own `SearchView` of `policy`, merging their generate
    calls; results in job order. The first error any job raised is raised once all jobs have ended."""
    calls = _MergedCalls(policy, len(jobs))
    views = [SearchView(calls, i) for i in range(len(jobs))]
    results: list = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)
    done = [False] * len(jobs)

    def work(i: int) -> None:
        calls.go[i].wait()
        calls.go[i].clear()
        try:
            results[i] = jobs[i](views[i])
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            errors[i] = error
        finally:
            done[i] = True
            calls.back.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True, name=f"search-{i}") for i in range(len(jobs))]
    for t in threads:
        t.start()
    live = list(range(len(jobs)))
    while live:
        for i in live:  # one at a time, in order: each runs until it asks for samples or ends
            calls.go[i].set()
            calls.back.wait()
            calls.back.clear()
        live = [i for i in live if not done[i]]
        if live:
            calls.answer(live)
    for t in threads:
        t.join()
    for error in errors:
        if error is not None:
            raise error
    return results
