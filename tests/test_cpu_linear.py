"""oneDNN-packed linears (mars.decoding.cpu_linear): the same products as nn.Linear, and the decoders' exactness
on a packed model, against HF's own greedy generate on that model."""

import pytest
import torch
from torch import nn

from mars.decoding.cpu_linear import PackedLinear, onednn_available, pack_linears
from mars.decoding.engine import generate
from mars.decoding.generation import encode_prompts, load_model
from mars.training.data import load_records
from tests.test_generation import hf_greedy

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no oneDNN")


@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_computes_nn_linear_at_every_row_count(bias):
    torch.manual_seed(0)
    linear = nn.Linear(96, 160, bias=bias)
    packed = PackedLinear(linear)
    with torch.inference_mode():
        for shape in [(1, 96), (3, 96), (16, 96), (2, 5, 96)]:
            x = torch.randn(shape)
            torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)
            assert packed(x).shape == (*shape[:-1], 160)


def test_pack_linears_refuses_a_model_it_cannot_pack():
    with pytest.raises(RuntimeError, match="float32 model on the CPU"):
        pack_linears(nn.Sequential(nn.Linear(4, 4)).to(torch.bfloat16))


def test_decoders_on_a_packed_model_give_hf_greedy_tokens_of_that_model(trained_tiny):
    model, tokenizer = load_model(trained_tiny["mars"], dtype="float32", device="cpu")
    records = load_records(trained_tiny["world"] / "data", "test")
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in records[1::7][:4]])
    probe = torch.tensor([prompts[0]])
    with torch.inference_mode():
        before = model(input_ids=probe).logits
    linears = sum(type(m) is nn.Linear for m in model.modules())
    assert pack_linears(model) == linears > 0
    assert not any(type(m) is nn.Linear for m in model.modules())
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=probe).logits, before, rtol=1e-4, atol=1e-4)
    expected = hf_greedy(model, tokenizer, prompts, 20)
    kw = dict(
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
        mask_token_id=tokenizer.mask_token_id,
        block_size=4,
        max_new_tokens=20,
    )
    for method, tau in (("mars", 1.0), ("mars_lossless", 0.5)):
        got = [g.token_ids for g in generate(model, prompts, cache="cursor", method=method, tau=tau, **kw)]
        assert got == expected, method
