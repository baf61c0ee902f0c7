"""Attention masks of the dual-stream input (docs/method.md sections 1 and 2).

The training input is ``[clean | noisy]``: the clean stream is the sequence x (positions 0..L-1), the noisy stream is
a copy of x with its response tokens replaced by [MASK], again at positions 0..L-1.  Because the noisy positions
before the first block that carries a loss are never needed, the noisy stream may start at ``noisy_start`` (a
multiple of the block size); its positions are then ``noisy_start..L-1``.

Every rule below is written over the *absolute* positions p (0..L-1) with ``blk(p) = p // B``:

=============  ==================  ============================  ==============================
query -> key   mars                bidirectional                 block_diffusion (BD3-LM)
=============  ==================  ============================  ==============================
clean->clean   k <= q              k <= q                        blk(k) <= blk(q)
noisy->clean   blk(k) < blk(q)     blk(k) < blk(q)               blk(k) < blk(q)
noisy->noisy   same blk, k <= q    same blk                      same blk
clean->noisy   never               never                         never
=============  ==================  ============================  ==============================

Padding keys are never attended.  Masks are returned as booleans (True = may attend); :func:`additive` turns them
into the float mask transformers needs (a boolean 4D mask is silently wrong with eager attention).
"""

from __future__ import annotations

import torch

VARIANTS = ("mars", "bidirectional", "block_diffusion")


def check_variant(variant: str, block_size: int) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown attention variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")


def dual_stream_mask(
    key_padding: torch.Tensor, block_size: int, variant: str = "mars", noisy_start: int = 0
) -> torch.Tensor:
    """Boolean attention mask of shape [batch, Lc + Ln, Lc + Ln] for the ``[clean | noisy]`` layout.

    ``key_padding`` is the [batch, L] attention mask of x (1 = real token, 0 = padding); the noisy stream covers
    positions ``noisy_start..L-1`` (``noisy_start`` must be a multiple of ``block_size``).
    """
    check_variant(variant, block_size)
    if noisy_start % block_size:
        raise ValueError(f"noisy_start ({noisy_start}) must be a multiple of block_size ({block_size})")
    real = key_padding.bool()
    length = real.shape[1]
    device = real.device
    pos = torch.arange(length, device=device)
    npos = pos[noisy_start:]
    blk, nblk = pos // block_size, npos // block_size

    if variant == "block_diffusion":
        clean_clean = blk[None, :] <= blk[:, None]
    else:
        clean_clean = pos[None, :] <= pos[:, None]
    noisy_clean = blk[None, :] < nblk[:, None]
    noisy_noisy = nblk[None, :] == nblk[:, None]
    if variant == "mars":
        noisy_noisy = noisy_noisy & (npos[None, :] <= npos[:, None])
    clean_noisy = torch.zeros(length, len(npos), dtype=torch.bool, device=device)

    top = torch.cat([clean_clean, clean_noisy], dim=1)
    bottom = torch.cat([noisy_clean, noisy_noisy], dim=1)
    structure = torch.cat([top, bottom], dim=0)  # [Lc+Ln, Lc+Ln], shared by the batch
    keys_real = torch.cat([real, real[:, noisy_start:]], dim=1)  # [batch, Lc+Ln]
    return structure[None, :, :] & keys_real[:, None, :]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, q, k] boolean -> [batch, 1, q, k] float mask: 0 where allowed, the dtype's minimum elsewhere.

    The finite minimum (not -inf) keeps rows with no allowed key (padding queries) finite instead of NaN. It is
    bf16's when that is larger: under bf16 autocast (fp32 weights, the Trainer's bf16) attention casts the mask to
    bf16, where fp32's minimum becomes -inf, and fused CUDA kernels give NaN for a row of -inf.
    """
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, max(torch.finfo(dtype).min, torch.finfo(torch.bfloat16).min))
    return mask[:, None, :, :]
