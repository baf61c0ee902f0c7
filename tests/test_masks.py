"""The dual-stream attention mask against a brute-force transcription of the rules in docs/method.md section 2."""

import pytest
import torch

from mars.training.masks import VARIANTS, additive, dual_stream_mask


def brute_force(real: list[bool], block: int, variant: str, noisy_start: int = 0) -> list[list[bool]]:
    """Loops over (query, key) pairs; each branch is one line of the spec."""
    length = len(real)
    streams = [("clean", p) for p in range(length)] + [("noisy", p) for p in range(noisy_start, length)]
    rows = []
    for q_stream, q in streams:
        row = []
        for k_stream, k in streams:
            bq, bk = q // block, k // block
            if not real[k]:
                ok = False  # padding keys are never attended
            elif q_stream == "clean" and k_stream == "clean":
                ok = bk <= bq if variant == "block_diffusion" else k <= q
            elif q_stream == "noisy" and k_stream == "clean":
                ok = bk < bq
            elif q_stream == "noisy" and k_stream == "noisy":
                ok = bk == bq and (k <= q if variant == "mars" else True)
            else:  # clean query, noisy key
                ok = False
            row.append(ok)
        rows.append(row)
    return rows


@pytest.mark.parametrize("variant", VARIANTS)
def test_mask_matches_brute_force(variant):
    generator = torch.Generator().manual_seed(0)
    for length in range(1, 41):
        for block in range(1, 10):
            # no padding, right padding of random size, and a second row with its own padding
            n_real = [length, max(1, length - int(torch.randint(0, length, (1,), generator=generator)))]
            real = torch.tensor([[p < n for p in range(length)] for n in n_real])
            got = dual_stream_mask(real, block, variant)
            for row, flags in enumerate(real.tolist()):
                expected = torch.tensor(brute_force(flags, block, variant))
                assert torch.equal(got[row], expected), (variant, length, block, row)


@pytest.mark.parametrize("variant", VARIANTS)
def test_trimmed_noisy_stream_is_the_tail_of_the_full_mask(variant):
    for length in (5, 13, 24):
        for block in (1, 3, 4):
            real = torch.tensor([[p < length - 2 for p in range(length)]])
            full = dual_stream_mask(real, block, variant)
            for start in range(0, length, block):
                keep = list(range(length)) + [length + p for p in range(start, length)]
                trimmed = dual_stream_mask(real, block, variant, noisy_start=start)
                assert torch.equal(trimmed, full[:, keep][:, :, keep])
                assert torch.equal(trimmed[0], torch.tensor(brute_force(real[0].tolist(), block, variant, start)))


def test_bad_arguments():
    real = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="block_size"):
        dual_stream_mask(real, 0)
    with pytest.raises(ValueError, match="variant"):
        dual_stream_mask(real, 2, "sideways")
    with pytest.raises(ValueError, match="multiple"):
        dual_stream_mask(real, 2, "mars", noisy_start=1)


def test_additive_mask_values():
    allowed = torch.tensor([[[True, False], [True, True]]])
    mask = additive(allowed, torch.float32)
    assert mask.shape == (1, 1, 2, 2)
    assert mask[0, 0, 0, 0] == 0 and mask[0, 0, 1, 1] == 0
    assert mask[0, 0, 0, 1] == torch.finfo(torch.bfloat16).min  # finite in fp32 and bf16 alike


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_additive_mask_stays_finite_in_the_autocast_dtypes(dtype):
    """The Trainer's bf16 autocast keeps fp32 weights and casts the fp32 mask to bf16 inside attention: a masked
    entry must stay finite there (fp32's minimum would become -inf), and still mask (softmax weight 0)."""
    allowed = torch.tensor([[[True, False], [False, False]]])
    mask = additive(allowed, dtype)
    assert torch.isfinite(mask.to(torch.bfloat16 if dtype != torch.float16 else dtype)).all()
    weights = torch.softmax(torch.zeros(2, dtype=torch.float32) + mask[0, 0, 0].float(), dim=-1)
    assert weights.tolist() == [1.0, 0.0]
