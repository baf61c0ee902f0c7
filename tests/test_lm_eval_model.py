"""The ``mars`` lm-eval model: identical to lm-eval's ``hf`` at tau = 1.0, HFLM's stop-string handling, greedy only,
and decoding statistics that match ``mars.decoding.engine.generate``."""

from __future__ import annotations

import json
import shutil

import pytest

TASKS = ["tiny_ifeval", "tiny_bbh", "tiny_mmlu_pro", "tiny_gpqa", "tiny_gsm8k", "tiny_humaneval"]
MAX_GEN = 40
BATCH = 4


@pytest.fixture(scope="module")
def task_manager(trained_tiny, tmp_path_factory):
    from lm_eval.tasks import TaskManager

    from mars.evaluation.tasks import write_task_dir

    folder = tmp_path_factory.mktemp("eval_tasks")
    write_task_dir(trained_tiny["world"] / "data", folder)
    return TaskManager(include_path=str(folder), include_defaults=False)


def _evaluate(lm, task_manager, tasks, limit):
    import lm_eval

    return lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=task_manager,
        limit=limit,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        log_samples=True,
        gen_kwargs={"max_gen_toks": MAX_GEN},
        confirm_run_unsafe_code=True,
        bootstrap_iters=0,
    )


def _by_doc(results):
    """{task: [(doc_id, prompt, generation, metrics)]} from the harness's sample log."""
    out = {}
    for task, samples in results["samples"].items():
        rows = []
        for s in sorted(samples, key=lambda s: s["doc_id"]):
            rows.append((s["doc_id"], s["arguments"][0][0], s["resps"][0][0], {m: s[m] for m in s["metrics"]}))
        out[task] = rows
    return out


def _scores(results):
    return {
        task: {k: v for k, v in entry.items() if "," in k}
        for task, entry in {**results["results"], **results.get("groups", {})}.items()
    }


@pytest.mark.parametrize("checkpoint", ["ar", "mars"])
def test_tau_1_matches_lm_eval_hf(checkpoint, trained_tiny, task_manager):
    """Same generations and scores as the harness's own HFLM (same batch size, greedy) on every tiny task,
    tiny_bbh with its 1-shot multi-turn prompts and tiny_humaneval included."""
    from lm_eval.models.huggingface import HFLM

    from mars.evaluation.lm_eval_model import MARSLM

    folder = str(trained_tiny[checkpoint])
    mars = MARSLM(pretrained=folder, tau=1.0, batch_size=BATCH, device="cpu")
    ours = _evaluate(mars, task_manager, TASKS, limit=2)
    hf = _evaluate(HFLM(pretrained=folder, batch_size=BATCH, device="cpu"), task_manager, TASKS, limit=2)

    a, b = _by_doc(ours), _by_doc(hf)
    assert set(a) == set(b) and "tiny_humaneval" in a and any(t.startswith("tiny_bbh_") for t in a)
    assert a == b
    assert _scores(ours) == _scores(hf)
    shots = [p for t, rows in a.items() if t.startswith("tiny_bbh_") for _, p, _, _ in rows]
    assert all(p.count("<|im_start|>assistant\n") == 2 for p in shots)  # 1 shot turn + the generation prompt
    assert mars.tokens_per_forward == 1.0  # one-token mode
    assert any(r["generated_tokens"] > 1 for r in mars.decode_stats["requests"])


@pytest.fixture(scope="module")
def mars_lm(trained_tiny):
    from mars.evaluation.lm_eval_model import MARSLM

    return MARSLM(pretrained=str(trained_tiny["mars"]), tau=1.0, batch_size=BATCH, device="cpu")


@pytest.fixture(scope="module")
def hf_lm(trained_tiny):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(trained_tiny["mars"]), batch_size=BATCH, device="cpu")


def _requests(contexts, gen_kwargs):
    from lm_eval.api.instance import Instance

    return [
        Instance(request_type="generate_until", doc={}, arguments=(c, dict(gen_kwargs)), idx=0, metadata=("unit", i, 1))
        for i, c in enumerate(contexts)
    ]


def _contexts(lm, trained_tiny, n=3):
    rows = [json.loads(line) for line in open(trained_tiny["world"] / "data" / "test.jsonl")]
    rows = [r for r in rows if r["family"] in ("gsm8k", "gpqa", "bbh")][:n]
    return [lm.apply_chat_template([{"role": "user", "content": r["prompt"]}]) for r in rows]


def test_stop_strings_post_truncate_like_hflm(mars_lm, hf_lm, trained_tiny):
    """A stop string that spans token boundaries is not seen at token level: the text is still cut at its first
    occurrence, as HFLM does; a token-aligned stop string also ends decoding early."""
    tok = mars_lm.tokenizer
    contexts = _contexts(mars_lm, trained_tiny)
    mars_lm.reset_stats()
    free = mars_lm.generate_until(_requests(contexts, {"until": [], "max_gen_toks": MAX_GEN}))
    by_doc = {r["doc_id"]: r["token_ids"] for r in mars_lm.decode_stats["requests"]}
    gen_ids = [[t for t in by_doc[i] if t not in tok.all_special_ids] for i in range(len(contexts))]
    assert [tok.decode(ids) for ids in gen_ids] == free

    # a 3-character stop string that starts inside a 2- or 3-character token and ends in a later one
    text, ids = max(zip(free, gen_ids), key=lambda x: len(x[0]))
    pos, spanning = 0, None
    for t in ids:
        piece = tok.decode([t])
        if 2 <= len(piece) <= 3 and pos + 4 <= len(text):
            cand = text[pos + 1 : pos + 4]
            if cand.strip() and text.find(cand) == pos + 1:
                spanning = cand
                break
        pos += len(piece)
    assert spanning is not None, text
    stop_ids = tok(spanning, add_special_tokens=False)["input_ids"]
    assert not any(ids[i : i + len(stop_ids)] == stop_ids for i in range(len(ids)))  # not a token-level match
    for until in ([spanning], [text[: max(1, len(text) // 3)].split()[-1]]):
        ours = mars_lm.generate_until(_requests(contexts, {"until": until, "max_gen_toks": MAX_GEN}))
        theirs = hf_lm.generate_until(_requests(contexts, {"until": until, "max_gen_toks": MAX_GEN}))
        assert ours == theirs
        assert ours == [t.split(until[0])[0] for t in free]  # the unstopped text cut at the first occurrence
        cut = ours[free.index(text)]
        assert len(cut) < len(text) and cut == text[: text.find(until[0])]  # the stop string really cut it


def test_token_level_stop_ends_decoding_early(mars_lm, trained_tiny):
    tok = mars_lm.tokenizer
    contexts = _contexts(mars_lm, trained_tiny, n=1)
    mars_lm.reset_stats()
    free = mars_lm.generate_until(_requests(contexts, {"until": [], "max_gen_toks": MAX_GEN}))[0]
    n_free = mars_lm.decode_stats["generated_tokens"]
    ids = tok(free, add_special_tokens=False)["input_ids"]
    assert len(ids) >= 4, free
    # a whole token, early in the output, whose text does not occur before it: decoding must stop right there
    prefixes = [len(tok.decode(ids[:i])) for i in range(len(ids))]
    usable = [
        i
        for i in range(1, len(ids) - 1)
        if tok.decode(ids[i : i + 1]).strip() and free.find(tok.decode(ids[i : i + 1])) == prefixes[i]
    ]
    assert usable, free  # the trained fixture's output always has such a token; none would be a regression
    stop = tok.decode(ids[usable[0] : usable[0] + 1])
    mars_lm.reset_stats()
    cut = mars_lm.generate_until(_requests(contexts, {"until": [stop], "max_gen_toks": MAX_GEN}))[0]
    assert cut == free.split(stop)[0]
    assert mars_lm.decode_stats["generated_tokens"] < n_free  # stopped at the token-level stop sequence


@pytest.mark.parametrize(
    "gen_kwargs", [{"do_sample": True, "temperature": 0.7}, {"temperature": 0.5}, {"do_sample": False, "num_beams": 4}]
)
def test_greedy_only(mars_lm, trained_tiny, gen_kwargs):
    contexts = _contexts(mars_lm, trained_tiny, n=1)
    with pytest.raises(ValueError, match="greedily"):
        mars_lm.generate_until(_requests(contexts, {"until": [], "max_gen_toks": 4, **gen_kwargs}))


def test_registered_and_model_args(trained_tiny):
    from lm_eval.api.registry import get_model

    from mars.evaluation.lm_eval_model import MARSLM

    cls = get_model("mars")
    assert cls is MARSLM
    lm = cls.create_from_arg_string(
        f"pretrained={trained_tiny['mars']},tau=0.8,block_size=3,cache=block,"
        f"cache_block_size=8,metric=entropy,method=mars",
        {"batch_size": 2, "device": "cpu"},
    )
    args = lm.model_args()
    assert (
        args["tau"],
        args["block_size"],
        args["cache"],
        args["cache_block_size"],
        args["metric"],
        args["method"],
    ) == (0.8, 3, "block", 8, "entropy", "mars")
    assert args["mask_token_id"] == lm.tokenizer.convert_tokens_to_ids("<|mask|>")
    for bad in ("tau=0", "tau=1.2", "method=beam", "cache=lru", "metric=logit", "block_size=0"):
        with pytest.raises(ValueError):
            cls.create_from_arg_string(f"pretrained={trained_tiny['mars']},{bad}", {"device": "cpu"})
    # a window of 1 below tau 1 has no mask to fill: one token per forward whatever tau, so it is refused (at tau 1
    # no mask is appended whatever the window: plain greedy AR, allowed)
    with pytest.raises(ValueError, match="block_size 1 leaves method mars no mask to fill"):
        cls.create_from_arg_string(f"pretrained={trained_tiny['mars']},block_size=1,tau=0.9", {"device": "cpu"})
    lm = cls.create_from_arg_string(f"pretrained={trained_tiny['mars']},block_size=1,tau=1.0", {"device": "cpu"})
    assert lm.model_args()["block_size"] == 1


def test_missing_mask_token(trained_tiny, tmp_path):
    from mars.evaluation.lm_eval_model import MARSLM

    folder = tmp_path / "no_mask"
    shutil.copytree(trained_tiny["mars"], folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("mask_token", None)
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="mask token"):
        MARSLM(pretrained=str(folder), method="mars", device="cpu")
    lm = MARSLM(pretrained=str(folder), method="ar", device="cpu")  # AR decoding needs none
    assert lm.mask_token_id is None


def test_tokens_per_forward_matches_the_decoder(trained_tiny, tmp_path):
    """tokens per forward per task (as ``mars eval`` reports it) == generated tokens / forwards of
    mars.decoding.engine.generate run directly on the same prompts; > 1 for some task at tau < 1."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mars.decoding.engine import generate
    from mars.evaluation.evaluate import evaluate

    tau, limit, tasks = 0.5, 4, ["tiny_gsm8k", "tiny_mmlu_pro", "tiny_gpqa"]
    written = evaluate(
        model=trained_tiny["mars"],
        tasks=tasks,
        data=trained_tiny["world"] / "data",
        tau=tau,
        limit=limit,
        batch_size=16,
        max_gen_toks=MAX_GEN,
        output=tmp_path / "{task}.json",
        experiment="tpf-test",
        device="cpu",
    )
    tok = AutoTokenizer.from_pretrained(trained_tiny["mars"])
    model = AutoModelForCausalLM.from_pretrained(trained_tiny["mars"], dtype=torch.float32)
    tpf = {}
    for path, record in written:
        assert json.loads(path.read_text())["decoding"] == record["decoding"]
        samples = record["samples"]
        assert len(samples) == limit
        # one batch, in the harness's order (longest prompt first), as the evaluation ran it
        prompts = sorted(
            ((tok(s["prompt"])["input_ids"], s["prompt"]) for s in samples), key=lambda p: (-len(p[0]), p[1])
        )
        gens = generate(
            model,
            [p for p, _ in prompts],
            method="mars",
            block_size=4,
            tau=tau,
            cache="cursor",
            cache_block_size=32,
            metric="probability",
            max_new_tokens=MAX_GEN,
            eos_token_ids=[tok.eos_token_id],
            pad_token_id=tok.pad_token_id,
            mask_token_id=tok.mask_token_id,
        )
        direct = {text: g for (_, text), g in zip(prompts, gens)}
        for s in samples:
            g = direct[s["prompt"]]
            assert (s["generated_tokens"], s["forwards"], s["chunks"]) == (len(g.token_ids), g.forwards, g.chunks)
        gen_total, fwd_total = sum(len(g.token_ids) for g in gens), sum(g.forwards for g in gens)
        d = record["decoding"]
        assert (d["generated_tokens"], d["forwards"]) == (gen_total, fwd_total)
        assert d["tokens_per_forward"] == pytest.approx(gen_total / fwd_total)
        tpf[record["task"]] = d["tokens_per_forward"]
    assert max(tpf.values()) > 1.0, tpf
