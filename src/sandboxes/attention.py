"""Causal attention kernels for a CPU whose ensemble axis folds into the batch under ``torch.func.vmap``.

PyTorch has no vmap batching rule for the fused CPU kernel, so a vmapped ensemble ran it member by member,
forward and backward, and paid for stacking the members' outputs and for zero-filled gradients of every
member's slice: with wide models that made a batched ensemble slower than training its members one after
another. Attention treats every (sequence, head) pair on its own, so the members can join the batch
axis and the kernel runs once, on the same numbers per row.

For a head dimension of at most ``SMALL_HEAD`` a kernel of our own replaces the flash kernel, whose products with an
inner dimension of 8 leave most of the time to memory traffic: ``csrc/causal_attention.cpp``, compiled for this CPU on
first use, takes each query's keys in one pass with the exponentials in registers (base 2) and computes them again in
the backward pass instead of storing them. Its numbers are the same on every x86 CPU (see the source). It is the
operator ``torch.ops.sandboxes.narrow_attention`` (and ``..._backward``), with shapes on the ``meta`` device, where
the counts of work and memory that plan runs are made. Where it cannot be compiled (no C++ compiler or no ninja), a
blocked kernel in PyTorch operators stands in: it computes the exponentials once per block of queries and keeps them.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .runtime import kernel_device

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _folded(n: int, in_dims: tuple, *tensors: Tensor) -> list[Tensor]:
    """The ``n`` members' tensors with the member axis folded into the batch axis (a shared tensor repeated)."""
    members = [t.movedim(d, 0) if d is not None else t.expand(n, *t.shape) for t, d in zip(tensors, in_dims)]
    return [t.reshape(-1, *t.shape[2:]) for t in members]


def _unfolded(n: int, outputs: tuple[Tensor, ...]) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
    """A kernel's outputs on folded inputs with the member axis split off again, and the vmap out-dims."""
    return tuple(t.reshape(n, -1, *t.shape[1:]) for t in outputs), (0,) * len(outputs)


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
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v, out, logsumexp = ctx.saved_tensors
        dq, dk, dv = _BACKWARD(grad.contiguous(), q, k, v, out, logsumexp, 0.0, ctx.bias is None, attn_mask=ctx.bias)
        return dq, dk, dv, None

    @staticmethod
    def vmap(
        info: Any, in_dims: tuple, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None
    ) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        if bias is not None and in_dims[3] is not None:
            raise NotImplementedError("a per-member attention bias is not folded")
        return _unfolded(info.batch_size, _FlashAttention.apply(*_folded(info.batch_size, in_dims, q, k, v), bias))


# Query blocks of 64: at T = 1024 smaller (so more) blocks cost more in per-call overhead (one head of dimension
# 8, forward and backward: 4.6 ms with blocks of 32 against 3.4 with 64 for one sequence), larger ones in cache (16
# sequences: 19.7 ms with 32, 18.6 with 64, 20.3 with 128). From a head dimension of 32 on the flash kernel is as
# fast (batch 16: head dimension 8 at T = 1024, 18 against 42 ms; in a prototype with blocks of 32, 16 at T = 1024,
# 26 against 31 ms, and 32 at T = 256 and 2 heads, 32 against 31 ms). The block does not depend on the batch and
# the keys are padded to whole blocks (`_columns`), so a member's numbers do not depend on its ensemble.
BLOCK = 64
SMALL_HEAD = 16
# Sequences are run in tiles whose last block of weights takes at most 8 MiB, so that a block's passes stay in cache
# (eight members of 16 sequences at T = 1024, forward and backward: 168 to 194 ms in tiles of 32 sequences against
# 195 to 228 ms at once; 172 to 203 in tiles of 16, 254 to 263 in tiles of 8). Rows are independent, so a tile
# changes no number.
TILE_BYTES = 8 << 20
SAFE_SCORE = 63.0  # scores in base 2 whose exp2 (2^-63 to 2^63) and any row's sum of them are normal float32s
_LOG2E = math.log2(math.e)


def _spans(T: int) -> list[tuple[int, int]]:
    """The (first, last + 1) query positions of each block."""
    return [(start, min(start + BLOCK, T)) for start in range(0, T, BLOCK)]


def _columns(t: Tensor) -> Tensor:
    """``(n, T, d)`` keys or values as ``(n, d, T')``, zeros appended up to a whole number of blocks.

    Each block of queries then meets a multiple of 64 keys, some of them masked: PyTorch computes a tensor's
    exponentials in vectors except for a tail that does not fill one, whose scalar results can differ in the last
    bit, so with a tail a sequence's numbers would depend on its place in the batch (T = 100: a member alone and in
    its ensemble differed).
    """
    return F.pad(t.transpose(1, 2), (0, -t.shape[1] % BLOCK)).contiguous()


class _BlockedAttention(torch.autograd.Function):
    """Causal attention by blocks of queries, each against the keys up to its end, keeping each block's weights."""

    @staticmethod
    def forward(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, ...]:
        shape, (T, d) = q.shape, q.shape[-2:]
        q, k, v = (t.reshape(-1, T, d) for t in (q, k, v))
        scaled = q * (d**-0.5 * _LOG2E)  # exp2 of the scores in base 2 is exp of the scores
        keys, values = _columns(k), _columns(v)
        above = q.new_full((BLOCK, BLOCK), float("-inf")).triu_(1)
        # A row's scores lie within +-|q_i| max_j |k_j|; where that is at most SAFE_SCORE their exp2 is a normal float
        # without the usual shift by the row's maximum, which then costs two passes over the block only for the
        # rows beyond it (subtracting 0 from the others changes no bit, so a row never depends on its neighbours).
        near = scaled.norm(dim=-1).mul_(k.norm(dim=-1).amax(-1, keepdim=True)).le(SAFE_SCORE).unsqueeze(-1)
        shifted = q.device.type != "meta" and not bool(near.all())  # a count on the meta device has no values
        outs, inverse_totals, exps = [], [], []
        for start, end in _spans(T):
            exp = torch.bmm(scaled[:, start:end], keys[:, :, : start + BLOCK])
            exp[:, :, start:].add_(above[: end - start])
            if shifted:
                exp.sub_(exp.amax(-1, keepdim=True).masked_fill_(near[:, start:end], 0.0))
            exp.exp2_()
            inverse = exp.sum(-1).reciprocal_().unsqueeze(1)  # (n, 1, queries): the weights are exp / its row sum
            outs.append(torch.bmm(values[:, :, : start + BLOCK], exp.transpose(1, 2)).mul_(inverse))
            inverse_totals.append(inverse)
            exps.append(exp)
        return torch.cat(outs, 2).transpose(1, 2).reshape(shape), torch.cat(inverse_totals, 2), *exps

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple[Tensor, ...]) -> None:
        ctx.save_for_backward(*inputs, *output)
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)  # no zero-filled gradients for the exponentials, which nothing differentiates

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *_: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, out, inverse, *exps = ctx.saved_tensors
        shape, (T, d) = q.shape, q.shape[-2:]
        q, k, v = (t.reshape(-1, T, d) for t in (q, k, v))
        grad, out = grad.reshape(-1, T, d).contiguous(), out.reshape(-1, T, d)
        delta = (grad * out).sum(-1, keepdim=True)
        keys, values = _columns(k), _columns(v)
        # each row's 1 / sum scales the small (n, d, queries) factors instead of the (n, queries, keys) exponentials
        queries, grad_t = q.transpose(1, 2).mul(inverse), grad.transpose(1, 2).mul(inverse)
        dk, dv = torch.zeros_like(keys), torch.zeros_like(values)
        dq = []
        for (start, end), exp in zip(_spans(T), exps):
            stop = start + BLOCK
            dv[:, :, :stop].add_(torch.bmm(grad_t[:, :, start:end], exp))
            dscores = torch.bmm(grad[:, start:end], values[:, :, :stop]).sub_(delta[:, start:end]).mul_(exp)
            dq.append(torch.bmm(keys[:, :, :stop], dscores.transpose(1, 2)))
            dk[:, :, :stop].add_(torch.bmm(queries[:, :, start:end], dscores))
        scale = d**-0.5
        dq = torch.cat(dq, 2).mul_(inverse).transpose(1, 2).mul(scale)
        dk, dv = dk[:, :, :T].transpose(1, 2).mul(scale), dv[:, :, :T].transpose(1, 2)
        return dq.reshape(shape), dk.reshape(shape), dv.reshape(shape)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, q: Tensor, k: Tensor, v: Tensor) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        # only the output: the kept weights of the tiles stay with their nodes, and no caller reads them
        return _unfolded(info.batch_size, (_tiled(*_folded(info.batch_size, in_dims, q, k, v)),))


def _tiled(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The blocked kernel's output, run on tiles of sequences whose largest block of weights fits ``TILE_BYTES``."""
    B, H, T = q.shape[:3]
    per = max(1, TILE_BYTES // (H * BLOCK * T * q.element_size()))
    if B <= per:
        return _BlockedAttention.apply(q, k, v)[0]
    return torch.cat(
        [_BlockedAttention.apply(q[i : i + per], k[i : i + per], v[i : i + per])[0] for i in range(0, B, per)]
    )


SOURCE = Path(__file__).parent / "csrc" / "causal_attention.cpp"
HEADER = SOURCE.with_name("narrow_attention.h")  # the kernel itself, which the source includes
# -ffp-contract=off: no fused multiply-adds, which some CPUs lack, so that every CPU computes the same numbers
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]


def _cpu_flags() -> str:
    """The CPU's instruction-set flags (Linux), which the kernel is compiled for: a cache shared by several machines
    then holds one build per kind of CPU."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line for line in lines if line.startswith("flags")), "")


def narrow_kernels() -> types.ModuleType | None:
    """The compiled kernel of narrow heads (:func:`built_narrow_kernels`), or None where ``SANDBOXES_ATTENTION=blocked``
    asks for the blocked kernel: read at every call, so that one process can time the two side by side."""
    if os.environ.get("SANDBOXES_ATTENTION", "compiled") == "blocked":
        return None
    return built_narrow_kernels()


@functools.cache
def built_narrow_kernels() -> types.ModuleType | None:
    """The compiled kernel of narrow heads, built on first use (about a minute, once per CPU kind and source), or
    None with a warning where it cannot be built."""
    from torch.utils import cpp_extension

    # torch rebuilds when the source changes but not its header: both go into the name, with the CPU and the flags
    built_from = SOURCE.read_text() + HEADER.read_text() + _cpu_flags() + " ".join(FLAGS)
    name = "sandboxes_narrow_attention_" + hashlib.sha256(built_from.encode()).hexdigest()[:12]
    try:
        root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root())
        if not any(root.glob(f"*/{name}/{name}.so")) and not (root / name / f"{name}.so").exists():
            print("compiling the attention kernel of narrow heads for this CPU (once, about a minute)", file=sys.stderr)
        return cpp_extension.load(name, [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"])
    except Exception as error:  # no compiler, no ninja, another platform: PyTorch operators instead
        warnings.warn(
            f"the attention kernel of narrow heads could not be built ({error}); using a slower one", stacklevel=2
        )
        return None


def _forward_shapes(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """What the compiled forward pass returns, as shapes: the output, each query's maximum and inverse sum."""
    return torch.empty_like(q), q.new_empty(q.shape[:2]), q.new_empty(q.shape[:2])


def _backward_shapes(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, *_: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """What the compiled backward pass returns, as shapes: the gradients of queries, keys and values."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_LIBRARY = torch.library.Library("sandboxes", "DEF")
_LIBRARY.define("narrow_attention(Tensor q, Tensor k, Tensor v) -> (Tensor, Tensor, Tensor)")
_LIBRARY.define(
    "narrow_attention_backward(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor out, Tensor top, Tensor inverse)"
    " -> (Tensor, Tensor, Tensor)"
)
_LIBRARY.impl("narrow_attention", lambda q, k, v: tuple(built_narrow_kernels().forward(q, k, v)), "CPU")
_LIBRARY.impl("narrow_attention_backward", lambda *tensors: tuple(built_narrow_kernels().backward(*tensors)), "CPU")
_LIBRARY.impl("narrow_attention", _forward_shapes, "Meta")
_LIBRARY.impl("narrow_attention_backward", _backward_shapes, "Meta")
NARROW_OPS = (torch.ops.sandboxes.narrow_attention.default, torch.ops.sandboxes.narrow_attention_backward.default)


class _NarrowAttention(torch.autograd.Function):
    """The compiled kernel of narrow heads, with the vmap rule that folds members into the batch."""

    @staticmethod
    def forward(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        shape, (T, d) = q.shape, q.shape[-2:]
        out, top, inverse = torch.ops.sandboxes.narrow_attention(*(t.reshape(-1, T, d).contiguous() for t in (q, k, v)))
        return out.reshape(shape), top, inverse

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple[Tensor, Tensor, Tensor]) -> None:
        ctx.save_for_backward(*inputs, *output)
        ctx.mark_non_differentiable(*output[1:])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *_: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, out, top, inverse = ctx.saved_tensors
        shape, (T, d) = q.shape, q.shape[-2:]
        rows = [t.reshape(-1, T, d).contiguous() for t in (grad, q, k, v, out)]
        return tuple(t.reshape(shape) for t in torch.ops.sandboxes.narrow_attention_backward(*rows, top, inverse))

    @staticmethod
    def vmap(info: Any, in_dims: tuple, q: Tensor, k: Tensor, v: Tensor) -> tuple[tuple[Tensor, ...], tuple[int, ...]]:
        return _unfolded(info.batch_size, _NarrowAttention.apply(*_folded(info.batch_size, in_dims, q, k, v)))


def causal_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None) -> Tensor:
    """Causal softmax attention of ``(B, H, T, d)`` inputs; ``bias``, a ``(T, T)`` additive mask, replaces causality.

    On a CPU with the flash backend enabled, the folding kernels above (the compiled one, or where it is missing the
    blocked one, for causal float32 heads of at most ``SMALL_HEAD`` dimensions); elsewhere,
    or where a caller chose another backend (the exact Hessians choose the plain formula, which has a second
    derivative), PyTorch's.
    """
    device = kernel_device(q.device)
    if device == "cpu" and torch.backends.cuda.flash_sdp_enabled():
        if bias is None and q.shape[-1] <= SMALL_HEAD:
            if q.dtype == torch.float32 and narrow_kernels() is not None:
                return _NarrowAttention.apply(q, k, v)[0]
            return _tiled(q, k, v)
        return _FlashAttention.apply(q, k, v, bias)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None)
