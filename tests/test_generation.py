"""`mars generate` / `mars bench` and the text-level wrapper, on the briefly trained tiny checkpoints."""

import csv
import json
import math

import pytest
import torch

from mars.cli import main
from mars.decoding.generation import encode_prompts, generate_text, load_model, render_chunks
from mars.training.data import load_records


@pytest.fixture(scope="module")
def prompts(trained_tiny):
    return [r["prompt"] for r in load_records(trained_tiny["world"] / "data", "test")][::5][:6]


def test_text_generation_matches_hf_greedy_and_chunks_cover_the_text(trained_tiny, prompts):
    model, tokenizer = load_model(trained_tiny["mars"])
    ours = generate_text(
        model, tokenizer, prompts, batch_size=4, method="mars", block_size=4, tau=1.0, max_new_tokens=40
    )
    for prompt, out in zip(prompts, ours):
        ids = torch.tensor([encode_prompts(tokenizer, [prompt])[0]])
        with torch.inference_mode():
            ref = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=40,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )[0, ids.shape[1] :].tolist()
        if tokenizer.eos_token_id in ref:
            ref = ref[: ref.index(tokenizer.eos_token_id) + 1]
        assert out.token_ids == ref
        assert out.chunks == [1] * len(ref) and out.forwards == len(ref)
    fast = generate_text(
        model, tokenizer, prompts, batch_size=4, method="mars", block_size=4, tau=0.3, max_new_tokens=40
    )
    for out in fast:
        assert "".join(out.chunk_texts) == tokenizer.decode(out.token_ids, skip_special_tokens=True)
        # the generated text may itself contain brackets: compare against the chunks, not a bracket count
        assert render_chunks(out) == "".join(f"[{piece}]" for piece in out.chunk_texts)
        assert len(out.chunk_texts) == len(out.chunks) == out.forwards
        assert out.tokens_per_forward == pytest.approx(len(out.token_ids) / out.forwards)
    assert max(o.tokens_per_forward for o in fast) > 1.0


def test_stop_strings_end_the_text(trained_tiny, prompts):
    model, tokenizer = load_model(trained_tiny["mars"])
    full = generate_text(model, tokenizer, prompts, method="ar", max_new_tokens=40)
    tested = 0
    for prompt, out in zip(prompts, full):
        words = out.text.split()
        if len(words) < 3:
            continue
        tested += 1
        stop = " " + words[2]
        cut = generate_text(model, tokenizer, [prompt], method="ar", max_new_tokens=40, stop=[stop])[0]
        assert stop not in cut.text and out.text.startswith(cut.text)
        assert cut.text == out.text[: out.text.find(stop)]
        assert len(cut.token_ids) <= len(out.token_ids)
    assert tested >= len(prompts) // 2, [o.text for o in full]  # most prompts really were cut


def test_generate_cli_shows_chunks(trained_tiny, capsys):
    code = main(
        [
            "generate",
            "--model",
            str(trained_tiny["mars"]),
            "--prompt",
            "What is 2 plus 3?",
            "--tau",
            "0.3",
            "--max-new-tokens",
            "20",
            "--show-chunks",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "### What is 2 plus 3?" in out and "[" in out and "tokens per forward" in out
    code = main(["generate", "--model", str(trained_tiny["mars"]), "--prompt", "hi", "--max-new-tokens", "5", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == 1 and len(rows[0]["token_ids"]) <= 5


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--tau", "1.5"], "tau"),
        (["--tau", "0"], "tau"),
        (["--cache", "disk"], "cache"),
        (["--metric", "vibes"], "metric"),
        (["--block-size", "-1"], "--block-size must be an integer >= 1"),
        (["--method", "beam"], "method"),
        (["--max-new-tokens", "0"], "max-new-tokens"),
    ],
)
def test_generate_cli_bad_arguments(trained_tiny, capsys, flags, needle):
    code = main(["generate", "--model", str(trained_tiny["mars"]), "--prompt", "hi", *flags])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(err) == 1 and needle in err[0]


def test_generate_cli_missing_model_and_missing_mask_token(trained_tiny, tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "hi"]) == 2
    assert "not found" in capsys.readouterr().err
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "nomask"
    shutil.copytree(trained_tiny["ar"], folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.mask_token = None
    tokenizer.save_pretrained(folder)
    argv = ["generate", "--model", str(folder), "--prompt", "hi", "--method", "mars", "--tau", "0.5"]
    assert main([*argv, "--block-size", "4"]) == 2
    assert "mask token" in capsys.readouterr().err
    assert main(["generate", "--model", str(folder), "--prompt", "hi", "--method", "ar", "--max-new-tokens", "3"]) == 0


def test_bench_writes_table5_data(trained_tiny, tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(
        [
            "bench",
            "--model",
            str(trained_tiny["mars"]),
            "--data",
            str(trained_tiny["world"] / "data"),
            "--output",
            str(out),
            "--batch-sizes",
            "1,2",
            "--num-prompts",
            "4",
            "--reps",
            "1",
            "--cache-block-sizes",
            "4",
            "--max-new-tokens",
            "24",
            "--tau",
            "0.5",
            "--cpu-linear",  # (every setting on the same packed model: mars.decoding.cpu_linear)
            "onednn_packed",
        ]
    )
    assert code == 0
    rows = list(csv.DictReader(open(out / "bench.csv")))
    settings = {
        "ar_hf_kv",
        "mars_tau1",
        "mars_none",
        "mars_block_4",
        "mars_authors_block_4",
        "mars_cursor",
        "mars_lossless",
        "prompt_lookup",
    }
    assert {r["setting"] for r in rows} == settings
    assert {int(r["batch_size"]) for r in rows} == {1, 2}
    for r in rows:
        assert math.isfinite(float(r["tokens_per_s"])) and float(r["tokens_per_s"]) > 0
        if r["setting"] == "ar_hf_kv":
            assert float(r["speedup_vs_ar_kv"]) == pytest.approx(1.0)
        if r["setting"] == "mars_cursor":
            assert 0 < float(r["decode_efficiency"]) and float(r["ideal_speedup"]) > 0
            # the ideal's range comes from the quartiles of the two forward costs: it brackets the median ideal
            assert float(r["ideal_min"]) <= float(r["ideal_speedup"]) <= float(r["ideal_max"])
            assert float(r["decode_efficiency_min"]) <= float(r["decode_efficiency_max"])
            # batch 1 never pads; a batch of 2 rows feeds at least the narrowest window (1 token + B-1 masks)
            assert float(r["fed_window_tokens"]) > 1 and float(r["width_efficiency"]) > 0
        assert float(r["speedup_min"]) <= float(r["speedup_max"])
    # same prompts, same greedy decisions: every exact MARS cache generates the same number of tokens (the authors'
    # block cache decodes with another window, so it may accept differently)
    for b in ("1", "2"):
        counts = {
            r["tokens"]
            for r in rows
            if r["batch_size"] == b
            and r["setting"].startswith("mars_")
            and r["setting"] not in ("mars_tau1", "mars_lossless")
            and not r["setting"].startswith("mars_authors_block_")
        }
        assert len(counts) == 1
        # lossless MARS: exactly the greedy tokens (tests/test_lossless_jobs.py compares the tokens themselves)
        greedy = {r["setting"]: r["tokens"] for r in rows if r["batch_size"] == b}
        assert greedy["mars_lossless"] == greedy["mars_tau1"]
    meta = json.loads((out / "bench.json").read_text())
    assert meta["machine"]["torch"] == torch.__version__ and meta["tau"] == 0.5
    assert meta["cpu_linear"] == ("onednn_packed" if meta["device"] == "cpu" else None)  # (CPU only)


@pytest.fixture(scope="module")
def ragged(trained_tiny):
    """Ten test prompts of the trained tiny world (lengths differ: a ragged batch)."""
    model, tokenizer = load_model(trained_tiny["mars"])
    records = load_records(trained_tiny["world"] / "data", "test")
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records[::4][:10]])
    assert len({len(p) for p in prompts}) > 3
    return model, tokenizer, prompts


def hf_greedy(model, tokenizer, prompts, max_new_tokens):
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=pad,
        )[:, width:].tolist()
    return [row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row for row in out]


def test_trained_model_one_token_mode_equals_hf_generate_for_every_cache(ragged):
    from mars.decoding.engine import generate

    model, tokenizer, prompts = ragged
    reference = hf_greedy(model, tokenizer, prompts, 48)
    assert any(tokenizer.eos_token_id in r for r in reference)  # some rows end early, others run the budget
    kwargs = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
        max_new_tokens=48,
        tau=1.0,
    )
    for method, cache, c in [
        ("mars", "none", 32),
        ("mars", "block", 4),
        ("mars", "block", 32),
        ("mars", "cursor", 32),
        ("ar", "cursor", 32),
        ("jacobi", "cursor", 32),
    ]:
        outs = generate(model, prompts, method=method, cache=cache, cache_block_size=c, block_size=4, **kwargs)
        assert [o.token_ids for o in outs] == reference, (method, cache, c)
        if method != "jacobi":
            assert all(o.forwards == len(o.token_ids) for o in outs)


@pytest.mark.parametrize("tau", [0.95, 0.7, 0.5])
def test_trained_model_caches_give_the_uncached_tokens(ragged, tau):
    from mars.decoding.engine import generate

    model, tokenizer, prompts = ragged
    kwargs = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
        max_new_tokens=48,
        tau=tau,
        block_size=4,
        method="mars",
    )
    uncached = generate(model, prompts, cache="none", **kwargs)
    for cache, c in [("block", 4), ("block", 16), ("cursor", 32)]:
        outs = generate(model, prompts, cache=cache, cache_block_size=c, **kwargs)
        assert [o.token_ids for o in outs] == [o.token_ids for o in uncached], (cache, c)
        assert [o.chunks for o in outs] == [o.chunks for o in uncached], (cache, c)
    if tau <= 0.7:
        assert max(max(o.chunks) for o in uncached) > 1  # multi-token acceptance really happened


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_corrupt_checkpoint_is_one_error_line(trained_tiny, tmp_path, capsys, damage):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(trained_tiny["mars"], model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a safetensors file" * 10)
    code = main(["generate", "--model", str(model), "--prompt", "What is 2 plus 3?"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: cannot load checkpoint {model}"), err


def test_forward_costs_time_every_forward_against_the_same_context(trained_tiny):
    """Each timed forward is cropped from the cache again: every one of them sees the context it was asked for
    (prompt + ``context`` tokens), not the timed forwards before it, and the widths are fed as asked."""
    from mars.bench.wallclock import forward_costs

    model, tokenizer = load_model(str(trained_tiny["mars"]))
    seen = []
    original = model.forward

    def spy(*args, **kwargs):
        cache = kwargs.get("past_key_values")
        seen.append((cache.get_seq_length() if cache is not None else 0, kwargs["input_ids"].shape[1]))
        return original(*args, **kwargs)

    model.forward = spy
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7]]
    costs = forward_costs(model, prompts, 2, 6, tokenizer.mask_token_id, tokenizer.pad_token_id, context=4, reps=4)
    prefill, *timed = seen
    assert prefill == (0, 5 + 4)  # the longer prompt + 4 context tokens, the shorter one left-padded
    assert len(timed) == 2 * (4 + 2) and {length for length, _ in timed} == {9}
    assert sorted({width for _, width in timed}) == [1, 6]
    for name in ("t1", "tw"):
        lo, mid, hi = costs[name]
        assert 0 < lo <= mid <= hi


def test_a_mars_checkpoint_says_how_to_decode_it_in_its_own_config(trained_tiny, tmp_path):
    """config.json carries the mask token id (where vLLM's parallel drafting reads it) and the trained window; a
    copy without run_config.json still decodes with B = 4."""
    import shutil

    from transformers import AutoConfig

    from mars.checkpoints import trained_block_size

    copy = tmp_path / "mars"
    shutil.copytree(trained_tiny["mars"], copy)
    (copy / "run_config.json").unlink()
    config = AutoConfig.from_pretrained(copy)
    _, tokenizer = load_model(copy)
    assert config.mask_token_id == tokenizer.mask_token_id
    assert config.mars == {"method": "mars", "block_size": 4, "variant": "mars", "mask_token": tokenizer.mask_token}
    assert trained_block_size(copy) == 4
    assert trained_block_size(trained_tiny["ar"]) is None  # an AR checkpoint has no window


def test_show_chunks_shows_no_end_of_turn_token(trained_tiny, capsys):
    """The chunks are pieces of the text: the end-of-turn token the model stopped at is in no chunk."""
    model, tokenizer = load_model(trained_tiny["mars"])
    out = generate_text(model, tokenizer, ["What is 2 plus 3?"], method="mars", block_size=4, tau=0.3)[0]
    assert out.token_ids[-1] == tokenizer.eos_token_id  # the premise: it stopped at the end of its turn
    assert "".join(out.chunk_texts) == out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)
    argv = ["generate", "--model", str(trained_tiny["mars"]), "--prompt", "What is 2 plus 3?", "--tau", "0.3"]
    assert main([*argv, "--show-chunks"]) == 0
    printed = capsys.readouterr().out
    assert tokenizer.eos_token not in printed and render_chunks(out) in printed


def test_the_library_takes_a_string_as_one_prompt_and_refuses_what_the_command_refuses(small_init):
    from mars import generate

    model, tokenizer = load_model(small_init / "init")
    one = generate(model, tokenizer, "hi", max_new_tokens=3)
    assert [o.prompt for o in one] == ["hi"]
    assert one[0].token_ids == generate(model, tokenizer, ["hi"], max_new_tokens=3)[0].token_ids
    with pytest.raises(ValueError, match=r"^max_new_tokens must be an integer >= 1, got 0$"):  # as the command
        generate(model, tokenizer, ["hi"], max_new_tokens=0)
    with pytest.raises(ValueError, match=r"^block_size 1 leaves method mars no mask to fill"):
        generate(model, tokenizer, ["hi"], block_size=1, tau=0.9)
    assert len(generate(model, tokenizer, ["hi"], block_size=1, tau=1.0, max_new_tokens=2)) == 1
    with pytest.raises(ValueError, match=r"plus max_new_tokens 2000 exceeds the model's 1024 positions"):
        generate(model, tokenizer, ["hi"], max_new_tokens=2000)
    model.config.mars = {"method": "mars", "block_size": 4096}
    with pytest.raises(ValueError, match=r"block size \(config.mars\) 4096 exceeds the model's 1024 positions"):
        generate(model, tokenizer, ["hi"], tau=0.9)
