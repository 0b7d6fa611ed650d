"""An engine pool that *is* a `Policy`: N engine replicas as Ray actors behind one `generate`.

    pool = load_policy(folder, backend="vllm", replicas=4)            # or EnginePool(folder, config=PoolConfig(...))
    solve_batch(problems, pool, "mcts", ...)                          # strategies never know there are 4

Each replica is a Ray actor holding an ordinary `load_policy` policy (vLLM or transformers) with its
own resources (CPUs, GPUs; GPUs > 1 is vLLM tensor parallelism), placed in one placement group, as
OpenRLHF and verl run their vLLM engines. The pool:

- **generate** splits a call's prompts across the replicas by `planner.policy.routing` (a tree's
  prompts stay on the replica that holds its prefix in cache; the trees are balanced across
  replicas) and returns the samples in input order. Replica r samples with the seed
  `SeedSequence(seed).generate_state(N)[r]`, and the routing depends on the prompts alone, so a
  call's samples depend only on its seed; greedy samples equal one engine's.
- **load_weights** pushes one weight version to every replica (the tensors go into Ray's object
  store once) and records it: `weights_version`, and each replica's in `weights_versions()`.
- **faults**: a replica whose process dies is restarted by Ray (`max_restarts`); the pool waits for
  it, brings it to the current weight version (the last push stays in the object store for this),
  and sends it the call's prompts again, so the call returns complete results. A replica that
  restarted unnoticed between calls refuses requests made for another weight version, and is
  brought up to date the same way, so no sample ever comes from stale weights.
- **stats** count the pool's calls like any policy's; the tokens are the replicas' sums
  (`replica_stats()` has each replica's own counters, its engine seconds included).

The learner (rl/) pushes weights through `load_weights` exactly as into one engine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.policy.base import NamedTensors, Policy
from planner.policy.ray_cluster import check_resources, connect, reserve
from planner.policy.routing import assign_replicas, generation_suffix, routing_keys
from planner.policy.types import ComputeStats, SamplingParams

__all__ = ["PoolConfig", "EnginePool", "EngineReplica"]

logger = logging.getLogger(__name__)
PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class PoolConfig:
    """How many engine replicas, on what, and how requests reach them."""

    replicas: int = 2
    """Engine replicas (Ray actors), each a whole engine with its own copy of the weights."""
    cpus_per_replica: float = 1.0
    """CPUs Ray reserves per replica; on CPU also the engine's threads (unless `threads` is given)."""
    gpus_per_replica: float | None = None
    """GPUs per replica: a fraction shares one GPU, an integer > 1 is vLLM tensor parallelism over that
    many GPUs of one node. None: 1 when the Ray cluster has GPUs, else 0."""
    address: str | None = None
    """Ray cluster to join: "host:6379" (after `ray start --head`), "auto", or None ($RAY_ADDRESS, else a
    local Ray instance on this machine, shut down by `close`)."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Ray placement-group strategy of the replicas' bundles: "PACK" fills nodes in turn, "SPREAD" puts
    replicas on different nodes where it can (STRICT_*: must)."""
    max_restarts: int = 3
    """Times Ray restarts a replica whose process died; after that the pool raises."""
    route_prefix_tokens: int | None = None
    """None: route a prompt by the chat prompt it extends (planner.policy.routing); an integer K: by its
    first K tokens (for prompts whose first turn is shared, e.g. few-shot turns)."""
    balance_slack: float = 0.25
    """A replica takes at most (1 + slack) x its even share of a call's prompts; trees beyond that
    move to their next replica (0: even split, more cache misses; large: pure prefix affinity; measured
    in docs/benchmarks.md, "Engine pool")."""
    start_timeout_s: float = 900.0
    """Seconds to wait for the replicas' resources and for a replica to (re)start its engine."""

    def __post_init__(self) -> None:
        def fail(name, allowed):
            raise ValueError(f"PoolConfig.{name} must be {allowed}; got {getattr(self, name)!r}")

        if not isinstance(self.replicas, int) or isinstance(self.replicas, bool) or self.replicas < 1:
            fail("replicas", "an integer >= 1 (the number of engine replicas)")
        if not isinstance(self.cpus_per_replica, (int, float)) or not self.cpus_per_replica > 0:
            fail("cpus_per_replica", "a number > 0")
        gpus = self.gpus_per_replica
        if gpus is not None and (not isinstance(gpus, (int, float)) or gpus < 0 or (gpus > 1 and gpus != int(gpus))):
            fail("gpus_per_replica", "None, 0, a fraction of one GPU, or a whole number of GPUs")
        if self.placement_strategy not in PLACEMENT_STRATEGIES:
            fail("placement_strategy", f"one of {list(PLACEMENT_STRATEGIES)}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            fail("max_restarts", "an integer >= 0")
        if self.route_prefix_tokens is not None and (not isinstance(self.route_prefix_tokens, int)
                                                     or self.route_prefix_tokens < 1):
            fail("route_prefix_tokens", "None or an integer >= 1")
        if not isinstance(self.balance_slack, (int, float)) or not self.balance_slack >= 0:
            fail("balance_slack", "a number >= 0")
        if not self.start_timeout_s > 0:
            fail("start_timeout_s", "a number of seconds > 0")


class EngineReplica:
    """One engine in its own process (the body of a Ray actor): a `load_policy` policy and the weight
    version it holds (0: the model folder's own weights; a restart reruns this and starts at 0)."""

    def __init__(self, model_path: str, backend: str, dtype: str, seed: int, options: dict) -> None:
        from planner.policy import load_policy

        self.policy = load_policy(model_path, backend=backend, dtype=dtype, seed=seed, **options)
        self.version = 0

    def describe(self) -> dict:
        import planner
        return {"pid": os.getpid(), "version": self.version, "num_parameters": self.policy.num_parameters,
                "context_length": self.policy.context_length,
                "eos_token_ids": sorted(self.policy.eos_token_ids), "planner": planner.__file__}

    def generate(self, prompts: list[list[int]], params: SamplingParams, version: int):
        """(samples per prompt, prompt tokens served from cache), or None when this replica holds another
        weight version than the caller expects (it restarted since the last push)."""
        if version != self.version:
            return None
        before = self.policy.stats.copy()
        groups = self.policy.generate(prompts, params)
        return groups, (self.policy.stats - before).cached_prompt_tokens

    def load_weights(self, items: list, version: int) -> int:
        self.policy.load_weights(items)
        self.version = version
        return version

    def stats(self) -> ComputeStats:
        return self.policy.stats

    def sleep(self) -> None:
        self.policy.sleep()

    def wake_up(self) -> None:
        self.policy.wake_up()

    def close(self) -> None:
        self.policy.close()


def _engine_options(backend: str, options: dict, cpus: float, gpus: float) -> dict:
    """The backend's options inside a replica: its threads, its device, vLLM's tensor parallelism."""
    options = dict(options)
    if gpus == 0 and options.get("threads") is None:
        options["threads"] = max(1, int(cpus))
    device = str(options.get("device") or "")
    if backend == "hf":
        if gpus == 0 and device.startswith("cuda"):
            raise ValueError(f"device={device!r} needs GPUs in the replicas: set PoolConfig.gpus_per_replica (got 0)")
        if gpus > 1:
            raise ValueError(f"gpus_per_replica={gpus:g} is tensor parallelism, which only the vllm backend has; "
                             "the transformers backend uses one device: set gpus_per_replica to 1 or less")
        options["device"] = "cuda" if gpus > 0 else "cpu"  # a replica sees only its own GPUs (CUDA_VISIBLE_DEVICES)
    elif gpus > 1:
        options.update(tensor_parallel_size=int(gpus), distributed_executor_backend="mp")
    return options


class EnginePool(Policy):
    """N engine replicas behind the policy interface (see the module docstring)."""

    def __init__(self, model_path: str, backend: str = "hf", dtype: str = "float32", seed: int = 0,
                 config: PoolConfig | None = None, **backend_options) -> None:
        from transformers import AutoTokenizer

        from planner.policy import BACKENDS

        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
        super().__init__(seed)
        self.config = config = config or PoolConfig()
        self.backend, self.model_path = backend, str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self._suffix = generation_suffix(self.encode_prompt)
        self._actors: list = []
        self._group = None
        self.weights_version = 0
        """The last weight version pushed (0: the model folder's weights)."""
        self._weights_ref = None
        self._owns_ray = connect(config.address)
        try:
            import ray
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            gpus = config.gpus_per_replica
            if gpus is None:
                gpus = 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
            check_resources(config.replicas, config.cpus_per_replica, gpus)
            options = _engine_options(backend, backend_options, config.cpus_per_replica, gpus)
            self._group = reserve(config.replicas, config.cpus_per_replica, gpus, config.placement_strategy,
                                  config.start_timeout_s)
            actor = ray.remote(EngineReplica)
            self._actors = [actor.options(
                num_cpus=config.cpus_per_replica, num_gpus=gpus, max_restarts=config.max_restarts,
                max_task_retries=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=r, placement_group_capture_child_tasks=True),
            ).remote(self.model_path, backend, dtype, seed, options) for r in range(config.replicas)]
            infos = self._gather({r: a.describe.remote() for r, a in enumerate(self._actors)}, "start")
        except BaseException:
            self.close()
            raise
        self.num_parameters = infos[0]["num_parameters"]
        self.context_length = infos[0]["context_length"]
        self._eos = set(infos[0]["eos_token_ids"])

    # ---- the policy interface ----------------------------------------------------------------------
    @property
    def replicas(self) -> int:
        return len(self._actors)

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def routing_keys(self, prompts: Sequence[Sequence[int]]) -> list[bytes]:
        """Each prompt's routing key: the chat prompt it extends, or its first K tokens (planner.policy.routing)."""
        return routing_keys(prompts, self._suffix, self.config.route_prefix_tokens)

    def route(self, prompts: Sequence[Sequence[int]]) -> list[int]:
        """The replica each prompt goes to (planner.policy.routing)."""
        return assign_replicas(self.routing_keys(prompts), self.replicas, self.config.balance_slack)

    def _generate(self, prompts, params, seed):
        placed = self.route(prompts)
        members = {r: [i for i, p in enumerate(placed) if p == r] for r in sorted(set(placed))}
        seeds = np.random.SeedSequence(seed).generate_state(self.replicas)
        requests = {r: ([prompts[i] for i in rows], params.replace(seed=int(seeds[r]) % (2**31 - 1)))
                    for r, rows in members.items()}
        send = lambda r: self._actors[r].generate.remote(*requests[r], self.weights_version)  # noqa: E731
        replies = self._gather({r: send(r) for r in requests}, "generate", retry=send)
        results: list = [None] * len(prompts)
        cached = 0
        for r, (groups, replica_cached) in replies.items():
            for i, group in zip(members[r], groups):
                results[i] = group
            cached += replica_cached
        return results, cached

    def load_weights(self, named_tensors: NamedTensors) -> None:
        """Push one weight version to every replica; `weights_version` counts the pushes."""
        import ray

        items = named_tensors.items() if hasattr(named_tensors, "items") else named_tensors
        items = [(name, t.detach().to("cpu").contiguous()) for name, t in items]
        self._weights_ref = ray.put(items)  # copied into the object store now: for every replica and any restart
        self.weights_version += 1
        push = lambda r: self._actors[r].load_weights.remote(self._weights_ref, self.weights_version)  # noqa: E731
        self._gather({r: push(r) for r in range(self.replicas)}, "load_weights", retry=push)

    # ---- faults -----------------------------------------------------------------------------------
    def _gather(self, pending: dict, what: str, retry=None) -> dict:
        """Each replica's reply; a replica that died is waited for (Ray restarts it), brought to the current
        weight version and asked again with `retry(r)`. None as a reply means stale weights: the same."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        replies, attempts = {}, dict.fromkeys(pending, 0)
        while pending:
            r, ref = next(iter(pending.items()))
            try:  # a dead replica raises at once; only a start may hang (on resources), so only it times out
                reply = ray.get(ref, timeout=self.config.start_timeout_s if retry is None else None)
            except GetTimeoutError:
                raise TimeoutError(f"engine replica {r} did not {what} within PoolConfig.start_timeout_s="
                                   f"{self.config.start_timeout_s:g} s") from None
            except RayActorError as error:
                if retry is None:
                    raise RuntimeError(f"engine replica {r} failed to {what}: {error}") from error
                reply = None
                logger.warning("engine replica %d died during %s (%s); waiting for its restart", r, what,
                               type(error).__name__)
            if reply is not None:
                replies[r] = reply
                del pending[r]
                continue
            attempts[r] += 1
            if attempts[r] > self.config.max_restarts + 1:
                raise RuntimeError(f"engine replica {r} failed {attempts[r]} times in one {what}; giving up")
            self._bring_up_to_date(r)
            pending[r] = retry(r)
        return replies

    def _bring_up_to_date(self, r: int) -> None:
        """Wait until replica r runs again, then give it the current weights."""
        import ray
        from ray.exceptions import ActorDiedError

        actor = self._actors[r]
        try:
            info = ray.get(actor.describe.options(max_task_retries=-1).remote(), timeout=self.config.start_timeout_s)
        except ActorDiedError as error:
            raise RuntimeError(f"engine replica {r} is dead: Ray restarted it max_restarts={self.config.max_restarts} "
                               "times already, or it cannot start again (the cause below). Raise "
                               "PoolConfig.max_restarts, or find why its process dies (memory?)") from error
        if info["version"] != self.weights_version:
            logger.warning("engine replica %d restarted (pid %d) with weight version %d; pushing version %d",
                           r, info["pid"], info["version"], self.weights_version)
            ray.get(actor.load_weights.options(max_task_retries=-1).remote(self._weights_ref, self.weights_version))

    # ---- introspection and shutdown ---------------------------------------------------------------
    def _ask_all(self, method: str) -> list:
        import ray
        return ray.get([getattr(a, method).options(max_task_retries=-1).remote() for a in self._actors])

    def sleep(self) -> None:
        """Every replica frees its accelerator memory (vLLM sleep mode on GPU; a no-op elsewhere)."""
        self._ask_all("sleep")

    def wake_up(self) -> None:
        self._ask_all("wake_up")

    def describe_replicas(self) -> list[dict]:
        """Per replica: its process id, weight version, parameters, end-of-sequence ids, planner path."""
        return self._ask_all("describe")

    def weights_versions(self) -> list[int]:
        """The weight version each replica holds now."""
        return [info["version"] for info in self.describe_replicas()]

    def replica_stats(self) -> list[ComputeStats]:
        """Each replica's own counters since it (re)started: tokens, its engine calls and engine seconds."""
        return self._ask_all("stats")

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for actor in self._actors:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - best effort: the kill below ends it anyway
                pass
            ray.kill(actor, no_restart=True)
        self._actors = []
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group
            remove_placement_group(self._group)
            self._group = None
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
