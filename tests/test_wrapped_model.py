"""The MARS loss through the wrappers the Trainer hands to compute_loss (DataParallel, DDP), and under bf16 autocast."""

import pytest
import torch
import torch.distributed as dist

from mars.training.data import build_dataset, load_records
from mars.training.objective import build_dual_stream, dual_stream_loss
from mars.training.train import load_init, make_trainer
from tests.test_objective import MASK, make_batch, tiny_model
from tests.test_train import spec


def _loss_and_grads(model, inner, batch):
    inner.zero_grad()
    loss, parts = dual_stream_loss(model, batch, w_ar=1.0)
    loss.backward()
    return loss.detach(), parts, {n: p.grad.clone() for n, p in inner.named_parameters()}


@pytest.fixture
def gloo_group(tmp_path):
    """A real one-process gloo process group (what DDP on CPU runs on), torn down afterwards."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("wrapper", ["DataParallel", "DistributedDataParallel"])
def test_loss_through_a_wrapper_equals_the_unwrapped_loss(wrapper, request):
    ids, attention, labels = make_batch()
    batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=4)
    model = tiny_model("eager").train()
    plain_loss, plain_parts, plain_grads = _loss_and_grads(model, model, batch)
    if wrapper == "DataParallel":
        wrapped = torch.nn.DataParallel(model)
    else:
        request.getfixturevalue("gloo_group")
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    loss, parts, grads = _loss_and_grads(wrapped, model, batch)
    assert loss.item() == pytest.approx(plain_loss.item(), rel=1e-6)
    assert parts["loss_ar"].item() == pytest.approx(plain_parts["loss_ar"].item(), rel=1e-6)
    for name, grad in grads.items():
        assert torch.allclose(grad, plain_grads[name], atol=1e-7), name
    assert max(g.abs().max().item() for g in grads.values()) > 1e-4  # a real gradient went through the wrapper


def _decoder_layer_dtypes(small_init, tmp_path, method):
    s = spec(method=method, bf16=True, max_steps=1, batch_size=4, save_steps=100)
    model, tokenizer = load_init(str(small_init / "init"), s)
    dataset = build_dataset(load_records(small_init / "data", "train"), tokenizer, s)
    trainer = make_trainer(s, model, tokenizer, dataset, tmp_path / method)
    seen = []
    # A projection inside the first decoder layer: under autocast its output is bf16 (the residual stream itself
    # stays fp32, since autocast adds the bf16 branch outputs to the fp32 embeddings).
    layer = model.model.layers[0].self_attn.q_proj
    handle = layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    try:
        trainer.train()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("method", ["ar", "mars"])
def test_bf16_autocast_reaches_the_decoder_layers(small_init, tmp_path, method):
    """accelerate's bf16 autocast wraps model.forward only: a loss that called the decoder directly ran in fp32."""
    seen = _decoder_layer_dtypes(small_init, tmp_path, method)
    assert seen and set(seen) == {torch.bfloat16}
