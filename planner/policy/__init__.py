"""The one policy interface (see planner/policy/base.py) and its backends."""

from __future__ import annotations

import os

from planner.policy.base import Policy
from planner.policy.local_models import NAMED_MODELS, resolve_model
from planner.policy.pool import EnginePool, PoolConfig
from planner.policy.types import ComputeStats, Sample, SamplingParams

BACKENDS = ("hf", "vllm")


def load_policy(model_path: str | os.PathLike, backend: str = "hf", dtype: str = "float32", seed: int = 0,
                replicas: int = 1, pool: PoolConfig | None = None, **backend_kwargs) -> Policy:
    """Load a model behind the policy interface: a Hugging Face `save_pretrained` folder, or a name the
    scripts' --model accepts too (`NAMED_MODELS`: "smollm2", "qwen2.5-coder-0.5b"), resolved by the same
    `resolve_model` (a named model is converted once into the cache, then loaded as a folder).

    backend: "hf" (transformers, the reference) or "vllm" (an in-process vLLM engine with prefix caching).
    dtype: "float32" (backends agree to ~1e-5 in log-probability), "bfloat16" or "float16".
    Extra keyword arguments go to the backend (HFPolicy: device, max_batch_size, threads;
    VLLMPolicy: kv_cache_fraction, enforce_eager, max_model_len, threads, weight_sync).
    replicas: more than 1 gives an `EnginePool` of that many engines as Ray actors (planner/policy/pool.py),
    which is a `Policy` too; `pool` sets all its options (`PoolConfig`, whose `replicas` then counts).
    """
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise ValueError(f"replicas must be an integer >= 1 (1: one engine in this process; more: an engine pool "
                         f"on Ray); got {replicas!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be 'float32', 'bfloat16' or 'float16'; got {dtype!r}")
    path = resolve_model(model_path)
    if pool is not None or replicas > 1:
        if pool is not None and replicas not in (1, pool.replicas):
            raise ValueError(f"replicas={replicas} disagrees with pool.replicas={pool.replicas}: give one of them")
        return EnginePool(str(path), backend, dtype, seed, pool or PoolConfig(replicas=replicas), **backend_kwargs)
    if backend == "hf":
        from planner.policy.hf import HFPolicy
        return HFPolicy(str(path), dtype=dtype, seed=seed, **backend_kwargs)
    from planner.policy.vllm_backend import VLLMPolicy
    return VLLMPolicy(str(path), dtype=dtype, seed=seed, **backend_kwargs)


__all__ = ["Policy", "Sample", "SamplingParams", "ComputeStats", "load_policy", "BACKENDS", "EnginePool", "PoolConfig",
           "NAMED_MODELS", "resolve_model"]
