"""The authors' recipe settings (docs/method.md section 7) against hand-computed expectations: per-sequence loss
normalisation, EOS padding to a multiple of B, last-turn labels, the no-SFT 1/t weighting; and the trainer path
(accumulation, target counts) that carries them."""

import math

import pytest
import torch
from safetensors.torch import load_file

from mars.training.data import build_dataset, load_records, tokenize_conversation
from mars.training.objective import IGNORE, build_dual_stream, dual_stream_loss, inverse_t_weights, pad_to_block_eos
from mars.training.train import load_init, make_trainer
from tests.test_train import spec
from tests.test_train_data import labelled_spans

PAD, RESPONSE, MASK, EOS = 0, 1, 2, 3


class RowLogits(torch.nn.Module):
    """A stand-in causal LM whose logits at every position of row r are [0, a_r, 0, 0]: the cross-entropy of target
    RESPONSE is then ln(3 + e^a_r) - a_r whatever the input, so every loss can be worked out by hand."""

    def __init__(self, a: list[float]):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a))

    def forward(self, input_ids, logits_to_keep=0, **kwargs):
        b, length = input_ids.shape
        logits = torch.zeros(b, length, 4)
        logits[:, :, RESPONSE] = self.a[:, None]
        if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dtype == torch.bool:
            logits = logits[logits_to_keep]
        return type("Out", (), {"logits": logits})()


def two_sequences():
    """Row 0: 1 prompt token + 2 response tokens (2 targets); row 1: 1 prompt token + 4 response tokens (4)."""
    ids = torch.tensor([[PAD, RESPONSE, RESPONSE, PAD, PAD], [PAD, RESPONSE, RESPONSE, RESPONSE, RESPONSE]])
    attention = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    labels = torch.where((ids == RESPONSE) & attention.bool(), ids, torch.full_like(ids, IGNORE))
    return ids, attention, labels


def test_sequence_normalisation_on_two_sequences_of_unequal_length_by_hand():
    # a_0 = 0: CE = ln 4 = 1.3863; a_1 = ln 4: CE = ln 7 - ln 4 = 0.5596
    model = RowLogits([0.0, math.log(4.0)])
    ce0, ce1 = math.log(4.0), math.log(7.0 / 4.0)
    ids, attention, labels = two_sequences()
    batch = build_dual_stream(ids, attention, labels, mask_token_id=MASK, block_size=2)
    # token: every stream's 6 targets averaged together: (2 ce0 + 4 ce1) / 6 per stream
    token, parts = dual_stream_loss(model, batch, w_ar=1.0)
    assert parts["loss_mask"].item() == pytest.approx((2 * ce0 + 4 * ce1) / 6, rel=1e-6)
    assert token.item() == pytest.approx(2 * (2 * ce0 + 4 * ce1) / 6, rel=1e-6)  # 1.6704
    # sequence (the authors'): each sequence's (noisy + clean) sum over its own 2 or 4 targets, then the mean over
    # the 2 sequences: ((2 ce0 + 2 ce0) / 2 + (4 ce1 + 4 ce1) / 4) / 2 = ce0 + ce1
    sequence, parts = dual_stream_loss(model, batch, w_ar=1.0, normalization="sequence")
    assert sequence.item() == pytest.approx(ce0 + ce1, rel=1e-6)  # 1.9459
    assert parts["loss_mask"].item() == pytest.approx((ce0 + ce1) / 2, rel=1e-6)
    # the logged sums stay plain token sums in both
    assert parts["sum_mask"].item() == pytest.approx(2 * ce0 + 4 * ce1, rel=1e-6)
    # w_AR = 2 doubles only the clean stream's per-sequence term
    weighted, _ = dual_stream_loss(model, batch, w_ar=2.0, normalization="sequence")
    assert weighted.item() == pytest.approx(1.5 * (ce0 + ce1), rel=1e-6)
    # the step's sequence count, when given, replaces this batch's (accumulation over micro-batches)
    accumulated, _ = dual_stream_loss(model, batch, w_ar=1.0, normalization="sequence", num_sequences=4)
    assert accumulated.item() == pytest.approx((ce0 + ce1) / 2, rel=1e-6)


def test_eos_padding_to_a_multiple_of_the_block_size_and_its_targets():
    ids, attention, labels = two_sequences()
    padded_ids, padded_attention, padded_labels = pad_to_block_eos(
        ids, attention, labels, block_size=4, eos_token_id=EOS, pad_token_id=PAD
    )
    # row 0 has 3 tokens -> 4 (one EOS); row 1 has 5 -> 8 (three EOS): the batch widens from 5 to 8 columns
    assert padded_ids.tolist() == [
        [PAD, RESPONSE, RESPONSE, EOS, PAD, PAD, PAD, PAD],
        [PAD] + [RESPONSE] * 4 + [EOS] * 3,
    ]
    assert padded_attention.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1] * 8]
    assert padded_labels.tolist() == [
        [IGNORE, RESPONSE, RESPONSE, EOS, IGNORE, IGNORE, IGNORE, IGNORE],
        [IGNORE] + [RESPONSE] * 4 + [EOS] * 3,
    ]
    # the EOS tokens are targets of both streams: row 1 predicts EOS after its last response token and after each
    # EOS but the last, and they are masked in the noisy stream
    batch = build_dual_stream(padded_ids, padded_attention, padded_labels, mask_token_id=MASK, block_size=4, trim=False)
    assert batch.clean_targets[1].tolist() == [RESPONSE] * 4 + [EOS] * 3 + [IGNORE]
    assert batch.noisy_targets[1].tolist() == batch.clean_targets[1].tolist()
    assert batch.input_ids[1, 8:].tolist() == [PAD] + [MASK] * 7
    assert batch.num_response == 3 + 7
    # a row already at a multiple of B is unchanged
    same = pad_to_block_eos(
        ids[:1, :4],
        torch.ones(1, 4, dtype=torch.long),
        labels[:1, :4],
        block_size=2,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    assert same[0].tolist() == ids[:1, :4].tolist()


def test_last_turn_labels_on_a_three_turn_conversation(small_init):
    _, tokenizer = load_init(str(small_init / "init"), spec(method="ar"))
    messages = [
        {"role": "user", "content": "What is 1 plus 2?"},
        {"role": "assistant", "content": "1 + 2 = 3. #### 3"},
        {"role": "user", "content": "And 2 plus 2?"},
        {"role": "assistant", "content": "2 + 2 = 4. #### 4"},
        {"role": "user", "content": "And 4 plus 5?"},
        {"role": "assistant", "content": "4 + 5 = 9. #### 9"},
    ]
    spans = {}
    for turns in ("all", "last"):
        ids, labels = tokenize_conversation(tokenizer, messages, turns=turns)
        spans[turns] = [tokenizer.decode(s) for s in labelled_spans(ids, labels)]
    assert spans["all"] == [
        "1 + 2 = 3. #### 3<|im_end|>\n",
        "2 + 2 = 4. #### 4<|im_end|>\n",
        "4 + 5 = 9. #### 9<|im_end|>\n",
    ]
    assert spans["last"] == ["4 + 5 = 9. #### 9<|im_end|>\n"]
    # the setting reaches the training set
    record = {"messages": messages[:-1], "response": messages[-1]["content"]}
    row = build_dataset([record], tokenizer, spec(method="mars", loss_turns="last", max_length=256))[0]
    assert [tokenizer.decode(s) for s in labelled_spans(row["input_ids"], row["labels"])] == spans["last"]


def test_inverse_t_weighting_with_a_fixed_generator():
    ids, attention, labels = two_sequences()
    batch = build_dual_stream(
        ids,
        attention,
        labels,
        mask_token_id=MASK,
        block_size=2,
        generator=torch.Generator().manual_seed(7),
        mask_weighting="inverse_t",
    )
    u = torch.rand(2, generator=torch.Generator().manual_seed(7))  # the same draw, made here
    expected = [1.0 / (1e-3 + 0.999 * float(x) + 1e-6) for x in u]
    for row in range(2):
        has = batch.noisy_targets[row] != IGNORE
        assert batch.noisy_weights[row][has].tolist() == pytest.approx([expected[row]] * int(has.sum()), rel=1e-6)
        assert (batch.noisy_weights[row][~has] == 0).all()
    assert inverse_t_weights(2, torch.Generator().manual_seed(7), "cpu").tolist() == pytest.approx(expected, rel=1e-6)
    # every response token is masked whatever t is, and the loss is the weighted CE: w_r * (targets of r) * ce_r
    assert (batch.input_ids[:, ids.shape[1] :][labels != IGNORE] == MASK).all()
    model = RowLogits([0.0, math.log(4.0)])
    ce = [math.log(4.0), math.log(7.0 / 4.0)]
    loss, _ = dual_stream_loss(model, batch, w_ar=0.0)
    assert loss.item() == pytest.approx((expected[0] * 2 * ce[0] + expected[1] * 4 * ce[1]) / 6, rel=1e-5)
    with pytest.raises(ValueError, match="does not apply"):
        build_dual_stream(
            ids,
            attention,
            labels,
            mask_token_id=MASK,
            block_size=2,
            variant="block_diffusion",
            mask_weighting="inverse_t",
        )


def _one_update(small_init, work, batch_size, grad_accum, **recipe):
    s = spec(batch_size=batch_size, grad_accum=grad_accum, max_steps=1, save_steps=100, **recipe)
    model, tokenizer = load_init(str(small_init / "init"), s)
    records = load_records(small_init / "data", "train")[:8]
    trainer = make_trainer(s, model, tokenizer, build_dataset(records, tokenizer, s), work)
    trainer.train()
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize(
    "recipe",
    [dict(loss_normalization="sequence", pad_to_block="eos"), dict(pad_to_block="eos")],
    ids=["sequence+eos", "token+eos"],
)
def test_recipe_settings_keep_accumulation_equal_to_one_big_batch(small_init, tmp_path, recipe):
    """Per-sequence normalisation divides by the sequences of the whole optimizer step and EOS padding is counted
    before the Trainer counts targets: 4 micro-batches of 2 give the update of one batch of 8."""
    big = _one_update(small_init, tmp_path / "big", 8, 1, **recipe)
    accumulated = _one_update(small_init, tmp_path / "acc", 2, 4, **recipe)
    plain = _one_update(small_init, tmp_path / "plain", 8, 1)
    start = load_file(str(small_init / "init" / "model.safetensors"))
    moved = max((big[k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-3
    assert max((big[k] - accumulated[k]).abs().max().item() for k in start) < 1e-5 * max(1.0, moved) + 2e-6
    assert max((big[k] - plain[k]).abs().max().item() for k in start) > 1e-5  # the setting changed the update


@pytest.mark.parametrize("block_size,max_length", [(1, 256), (4096, 256), (256, 256)])
def test_a_block_size_without_a_mask_or_without_room_is_one_config_error(block_size, max_length):
    from mars.pipeline.config import ConfigError, check_spec

    with pytest.raises(ConfigError, match=r"config key 'spec.block_size': .* needs 2 <= block_size < max_length"):
        check_spec(spec(block_size=block_size, max_length=max_length))
    check_spec(spec(method="ar", block_size=1, max_length=max_length))  # AR SFT has no window
