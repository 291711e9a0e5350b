"""Fused causal attention on a CPU whose ensemble axis folds into the batch under ``torch.func.vmap``.

PyTorch has no vmap batching rule for the fused CPU kernel, so a vmapped ensemble ran it member by member,
forward and backward, and paid for stacking the members' outputs and for zero-filled gradients of every
member's slice: with wide models that made a batched ensemble slower than training its members one after
another. Attention treats every (sequence, head) pair on its own, so the members can join the batch
axis and the kernel runs once, on the same numbers per row.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class _FlashAttention(torch.autograd.Function):
    """The CPU flash kernel with its own backward and a vmap rule that folds members into the batch."""

    @staticmethod
    def forward(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        return _FORWARD(q, k, v, 0.0, bias is None, attn_mask=bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:
        q, k, v, bias = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.bias = bias
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v, out, logsumexp = ctx.saved_tensors
        dq, dk, dv = _BACKWARD(grad.contiguous(), q, k, v, out, logsumexp, 0.0, ctx.bias is None, attn_mask=ctx.bias)
        return dq, dk, dv, None

    @staticmethod
    def vmap(info: Any, in_dims: tuple, q: Tensor, k: Tensor, v: Tensor,
             bias: Tensor | None) -> tuple[tuple[Tensor, Tensor], tuple[int, int]]:
        if bias is not None and in_dims[3] is not None:
            raise NotImplementedError("a per-member attention bias is not folded")
        n = info.batch_size
        members = [t.movedim(d, 0) if d is not None else t.expand(n, *t.shape) for t, d in zip((q, k, v), in_dims)]
        out, logsumexp = _FlashAttention.apply(*(t.reshape(-1, *t.shape[2:]) for t in members), bias)
        return (out.reshape(n, -1, *out.shape[1:]), logsumexp.reshape(n, -1, *logsumexp.shape[1:])), (0, 0)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None) -> Tensor:
    """Causal softmax attention of ``(B, H, T, d)`` inputs; ``bias``, a ``(T, T)`` additive mask, replaces causality.

    On a CPU with the flash backend enabled, the folding kernel above; elsewhere, or where a caller chose
    another backend (the exact Hessians choose the plain formula, which has a second derivative), PyTorch's.
    """
    if q.device.type == "cpu" and torch.backends.cuda.flash_sdp_enabled():
        return _FlashAttention.apply(q, k, v, bias)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None)
