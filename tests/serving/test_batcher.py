"""mars.serving.batcher: requests that join and leave a running batch decode exactly as each would alone."""

import pytest
import torch

from mars.decoding.engine import generate
from mars.decoding.generation import encode_prompts, load_model
from mars.serving.batcher import ContinuousBatcher
from mars.training.data import load_records


@pytest.fixture(scope="module")
def setup(trained_tiny):
    model, tokenizer = load_model(trained_tiny["mars"])
    records = load_records(trained_tiny["world"] / "data", "test")
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records[:: max(1, len(records) // 6)][:6]])
    kw = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
    )
    return model, prompts, kw


def alone(model, prompt, kw, method, tau, budget):
    (g,) = generate(model, [prompt], method=method, tau=tau, block_size=4, max_new_tokens=budget, **kw)
    return g.token_ids


def run(batcher, schedule, steps_cap=500):
    """schedule: {step index: [(name, prompt, tau, budget)]} added before that step; returns {name: (tokens, why)}."""
    ids, out, reasons = {}, {}, {}
    step = 0
    while step < steps_cap and (step <= max(schedule) or batcher.active):
        for name, prompt, tau, budget in schedule.get(step, []):
            ids[batcher.add(prompt, max_new_tokens=budget, tau=tau)] = name
        for event in batcher.step():
            out.setdefault(ids[event.request], []).extend(event.tokens)
            if event.finished:
                reasons[ids[event.request]] = event.reason
        step += 1
    return {name: (out.get(name, []), reasons.get(name)) for name in ids.values()}


@pytest.mark.parametrize("method", ["mars", "mars_lossless"])  # (tau 1.0 rows: plain AR)
def test_staggered_joins_decode_as_each_request_alone(setup, method):
    model, prompts, kw = setup
    batcher = ContinuousBatcher(model, method=method, block_size=4, **kw)
    taus = [1.0, 0.9, 0.5, 0.7, 1.0, 0.3]
    budgets = [40, 12, 30, 1, 25, 40]
    schedule = {
        0: [("a", prompts[0], taus[0], budgets[0])],
        3: [("b", prompts[1], taus[1], budgets[1]), ("c", prompts[2], taus[2], budgets[2])],
        4: [("d", prompts[3], taus[3], budgets[3])],
        9: [("e", prompts[4], taus[4], budgets[4]), ("f", prompts[5], taus[5], budgets[5])],
    }
    got = run(batcher, schedule)
    for i, name in enumerate("abcdef"):
        expected = alone(model, prompts[i], kw, method, taus[i], budgets[i])
        tokens, reason = got[name]
        assert tokens == expected, name
        assert reason == ("stop" if expected[-1] == kw["eos_token_ids"][0] else "length"), name
    assert batcher.active == 0 and batcher.kv.valid.shape[0] == 0
    if method == "mars":  # lossy MARS at tau < 1 took several tokens per forward somewhere
        assert batcher.stats["model_calls"] < sum(len(got[n][0]) for n in "abcdef")


def test_a_cancelled_request_leaves_and_the_others_are_unchanged(setup):
    model, prompts, kw = setup
    batcher = ContinuousBatcher(model, method="mars", block_size=4, **kw)
    a = batcher.add(prompts[0], max_new_tokens=40, tau=0.8)
    b = batcher.add(prompts[1], max_new_tokens=40, tau=0.8)
    c = batcher.add(prompts[2], max_new_tokens=40, tau=0.8)  # cancelled before it ever ran
    assert batcher.cancel(c) and batcher.active == 2
    out = {a: [], b: []}
    for _ in range(3):
        for e in batcher.step():
            out[e.request] += e.tokens
    assert batcher.cancel(b) and not batcher.cancel(b)
    assert batcher.kv.valid.shape[0] == len(batcher.rows) == 1  # its cache row is gone
    while batcher.active:
        for e in batcher.step():
            out[e.request] += e.tokens
    assert out[a] == alone(model, prompts[0], kw, "mars", 0.8, 40)
    assert out[b] == alone(model, prompts[1], kw, "mars", 0.8, 40)[: len(out[b])]


def test_tau_set_between_forwards_applies_from_the_next_forward(setup):
    model, prompts, kw = setup
    batcher = ContinuousBatcher(model, method="mars", block_size=4, **kw)
    rid = batcher.add(prompts[0], max_new_tokens=60, tau=0.2)
    multi = False
    while batcher.active and not multi:  # at tau 0.2 some forward accepts several tokens
        multi = any(len(e.tokens) > 1 for e in batcher.step())
    assert multi and batcher.active
    batcher.set_tau(rid, 1.0)  # one token per forward from the next forward on
    rest = []
    while batcher.active:
        rest += batcher.step()
    assert rest and all(len(e.tokens) == 1 for e in rest)


def test_bad_requests_are_refused(setup):
    model, _, kw = setup
    batcher = ContinuousBatcher(model, method="mars", block_size=4, **kw)
    with pytest.raises(ValueError, match="at least one token"):
        batcher.add([], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        batcher.add([1, 2], max_new_tokens=0)
    with pytest.raises(ValueError, match="method must be one of"):
        ContinuousBatcher(model, method="jacobi", **kw)
    assert torch.is_tensor(batcher.kv.valid)
