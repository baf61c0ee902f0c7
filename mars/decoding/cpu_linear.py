"""Linear layers with oneDNN-packed weights, for decoding on a CPU.

On a CPU, PyTorch's default ``F.linear`` (MKL) runs one row as a matrix-vector product that streams the weight once,
but a few rows (a MARS window of 4 tokens, a batch of 4) as a general matrix product that costs 2-3x as much for
SmolLM2's shapes: a 4-token window forward then costs 1.8x a one-token forward, and a multi-token decoder gains
little (docs/smollm2.md, ``benchmarks/cpu_linear_cost.py``). oneDNN's linear on a weight reordered once into its
blocked layout (what ``torch.compile``'s CPU freezing does) costs far less per extra row: on SmolLM2, 4 rows cost
1.30x one row (2.61x by default), and a 4-token window forward 1.26x a one-token forward at batch 1 (1.81x).
:func:`pack_linears` swaps every ``nn.Linear`` of an inference model for a :class:`PackedLinear`; the comparison it
serves must give the same model to every decoder, the reference included.
"""

from __future__ import annotations

import torch
from torch import nn

from mars.pipeline.config import ConfigError

CPU_LINEARS = ("default", "onednn_packed")


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's packed linear (the CPU wheels do)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """``nn.Linear``'s inference forward on a weight reordered once for oneDNN (float32, CPU, no gradient)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` (float32, on the CPU, used for inference only) by a
    :class:`PackedLinear` computing the same product; returns how many were replaced. The model can no longer be
    trained or saved as a checkpoint: load a fresh one for that."""
    if not onednn_available():
        raise RuntimeError("this PyTorch build has no oneDNN packed linear (cpu_linear: onednn_packed)")
    parameter = next(model.parameters())
    if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
        raise RuntimeError(
            f"cpu_linear: onednn_packed needs a float32 model on the CPU, got {parameter.dtype} on {parameter.device}"
        )
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, PackedLinear(child))
                replaced += 1
    return replaced


def use_cpu_linear(model: nn.Module, kernel: str) -> str | None:
    """Apply the ``cpu_linear`` setting (``bench.cpu_linear``, ``serve.cpu_linear``) to a loaded inference model:
    ``onednn_packed`` packs its linears when it is on the CPU; CUDA ignores the setting. Returns the kernel in use
    (None on CUDA); a bad setting or a model that cannot be packed is a ConfigError."""
    if kernel not in CPU_LINEARS:
        raise ConfigError(f"cpu_linear must be one of {', '.join(CPU_LINEARS)}, got {kernel!r}")
    if next(model.parameters()).device.type != "cpu":
        return None
    if kernel == "onednn_packed":
        try:
            pack_linears(model)
        except RuntimeError as exc:
            raise ConfigError(str(exc)) from None
    return kernel
