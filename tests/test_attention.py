"""The folding attention kernels: PyTorch's numbers, alone and vmapped, forward and backward, for narrow heads both
the compiled kernel and the blocked one that stands in where it cannot be built."""

import math
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from sandboxes import attention
from sandboxes.attention import causal_attention


@pytest.fixture(params=["compiled", "blocked"])
def kernel(request, monkeypatch) -> str:
    """Each test of narrow heads runs with the compiled kernel and with the blocked one in its place."""
    if request.param == "blocked":
        monkeypatch.setattr(attention, "narrow_kernels", lambda: None)
    else:
        assert attention.narrow_kernels() is not None, "the compiled kernel could not be built here"
    return request.param


def _recency(T: int, slope: float) -> torch.Tensor:
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return (-slope * distance.float()).masked_fill(distance < 0, float("-inf"))


@pytest.mark.parametrize("bias", [None, _recency(24, 0.3)], ids=["causal", "recency"])
def test_vmapped_members_fold_into_the_batch_with_pytorchs_numbers_and_gradients(bias, kernel):
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 3, 2, 24, 8, requires_grad=True) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None)
    folded = vmap(lambda a, b, c: causal_attention(a, b, c, bias))(q, k, v)
    torch.testing.assert_close(folded, expected)
    grad = torch.randn_like(expected)
    for mine, theirs in zip(
        torch.autograd.grad(folded, (q, k, v), grad), torch.autograd.grad(expected, (q, k, v), grad)
    ):
        torch.testing.assert_close(mine, theirs)


def test_a_member_alone_gets_what_it_gets_in_the_ensemble(kernel):
    torch.manual_seed(1)
    q, k, v = (torch.randn(3, 2, 2, 16, 4) for _ in range(3))
    folded = vmap(causal_attention)(q, k, v)
    assert torch.equal(folded[1], causal_attention(q[1], k[1], v[1]))


def test_the_plain_backend_when_a_caller_asks_for_it_has_a_second_derivative():
    # the Markov chapter's exact Hessians choose the plain formula; the flash kernel has no second derivative
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 1, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):
        (grad,) = torch.autograd.grad(causal_attention(q, k, v).square().sum(), q, create_graph=True)
        (second,) = torch.autograd.grad(grad.sum(), q)
    assert second.abs().sum() > 0


@pytest.mark.parametrize("T", [1, 63, 64, 70, 200])
@pytest.mark.parametrize("sharp", [False, True], ids=["unshifted", "some rows shifted"])
def test_the_kernels_of_small_heads_give_exact_attention_to_float32_round_off(T, sharp, kernel):
    # blocked: blocks of 64 queries, the last one ragged (compiled: blocks of 16 keys); compared with PyTorch's plain
    # formula in float64. Sharp: every third query 40 times longer, so its scores pass SAFE_SCORE and its row is
    # shifted by its maximum (the compiled kernel shifts every row)
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 3, T, 8) for _ in range(3))
    if sharp:
        q[:, :, ::3] *= 40
        bound = q.norm(dim=-1) * k.norm(dim=-1).amax(-1, keepdim=True) * 8**-0.5 * math.log2(math.e)
        assert (bound > attention.SAFE_SCORE).any()
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = causal_attention(q, k, v)
    grad = torch.randn_like(out)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(*exact, is_causal=True)
    tolerance = 40e-5 if sharp else 1e-5  # float32 round-off of a score grows with its size, 40 times here
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=tolerance)
    mine = torch.autograd.grad(out, (q, k, v), grad)
    for ours, theirs in zip(mine, torch.autograd.grad(expected, exact, grad.double())):
        torch.testing.assert_close(ours.double(), theirs, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize(
    "B, T, sharp", [(2, 100, False), (1, 100, False), (5, 100, False), (3, 20, False), (5, 100, True)]
)
def test_members_are_folded_bit_for_bit_as_alone_whatever_their_batch_and_length(B, T, sharp, kernel):
    # from T = 1 on; ragged lengths and odd batches put members at every offset of a block.
    # Sharp: the first member's queries 40 times longer, so its rows are shifted and the others' are not
    torch.manual_seed(4)
    q, k, v = (torch.randn(3, B, 1, T, 8) for _ in range(3))
    if sharp:
        q[0] *= 40
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    folded = vmap(causal_attention)(q, k, v)
    grads = torch.autograd.grad(folded.square().sum(), (q, k, v))
    for member in range(3):
        alone = [t[member].detach().requires_grad_() for t in (q, k, v)]
        out = causal_attention(*alone)
        assert torch.equal(folded[member], out)
        for mine, theirs in zip(grads, torch.autograd.grad(out.square().sum(), alone)):
            assert torch.equal(mine[member], theirs)


@pytest.mark.parametrize("vmapped", [False, True], ids=["alone", "vmapped"])
def test_tiles_of_sequences_change_no_number(vmapped, monkeypatch):
    # the blocked kernel's tiles. T = 100 in 2 blocks; tiles of 3 sequences split the 6 folded ones mid-member (2 per
    # member), and 5 alone in 3
    torch.manual_seed(5)
    shape = (3, 2, 1, 100, 8) if vmapped else (5, 1, 100, 8)
    q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
    attend = vmap(causal_attention) if vmapped else causal_attention

    def outputs() -> list[torch.Tensor]:
        out = attend(q, k, v)
        return [out, *torch.autograd.grad(out.square().sum(), (q, k, v))]

    monkeypatch.setattr(attention, "narrow_kernels", lambda: None)
    whole = outputs()
    monkeypatch.setattr(attention, "TILE_BYTES", (3 if vmapped else 2) * attention.BLOCK * 100 * 4)
    for tiled, untiled in zip(outputs(), whole):
        assert torch.equal(tiled, untiled)


def test_the_compiled_kernel_leaves_no_weight_on_the_future_and_survives_huge_scores():
    # a key after the query with a huge value would show in the output if any weight leaked to it; scores of 1e4
    # would overflow an exponential that is not shifted by the row's maximum
    torch.manual_seed(6)
    q, k, v = (torch.randn(2, 1, 40, 8) for _ in range(3))
    v[:, :, 20:] = 1e30
    out = causal_attention(q * 1e3, k, v)
    assert torch.isfinite(out[:, :, :20]).all() and out[:, :, :20].abs().max() < 10


def test_the_compiled_kernel_refuses_other_shapes_and_types():
    kernels = attention.narrow_kernels()
    with pytest.raises(RuntimeError, match="1 <= d <= 16"):
        kernels.forward(*(torch.randn(2, 5, 17) for _ in range(3)))
    with pytest.raises(RuntimeError, match="float32"):
        kernels.forward(*(torch.randn(2, 5, 8, dtype=torch.float64) for _ in range(3)))


def test_without_a_compiler_the_blocked_kernel_stands_in_with_a_warning(monkeypatch):
    from torch.utils import cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with pytest.warns(UserWarning, match="could not be built"):
        assert attention.built_narrow_kernels.__wrapped__() is None


def _cpu_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("g++"), reason="x86 and g++")
@pytest.mark.parametrize("d", [3, 8, 16])
def test_the_compiled_kernel_computes_the_same_numbers_for_every_instruction_set(d, tmp_path):
    # the kernel alone, built for plain x86-64 (SSE2: 4 lanes a vector), for AVX2 with FMA units (8; the build forbids
    # fusing) and for this CPU (AVX-512 here: 16); every build, and the extension, must give the same bits
    torch.manual_seed(7)
    N, T = 3, 37  # a ragged last block of keys
    tensors = [torch.randn(N, T, d) for _ in range(4)]
    tensors[0][0] *= 30  # sharp rows: weights that underflow
    inputs = tmp_path / "inputs.bin"
    inputs.write_bytes(np.array([N, T, d], dtype=np.int64).tobytes() + b"".join(t.numpy().tobytes() for t in tensors))
    builds = [["-march=x86-64"], ["-march=native"]] + [["-mavx2", "-mfma"]] * _cpu_has("avx2")
    outputs = []
    for flags in builds:
        program = tmp_path / f"kernel{len(outputs)}"
        subprocess.run(
            ["g++", "-std=c++17", "-O3", "-ffp-contract=off", *flags, f"-I{attention.HEADER.parent}",
             str(Path(__file__).parent / "fixtures" / "narrow_attention_main.cpp"), "-o", str(program)],
            check=True,
        )  # fmt: skip
        subprocess.run([str(program), str(inputs), str(tmp_path / "out.bin")], check=True)
        outputs.append((tmp_path / "out.bin").read_bytes())
    assert all(out == outputs[0] for out in outputs[1:])
    q, k, v, grad = tensors
    out, top, inverse = torch.ops.sandboxes.narrow_attention(q, k, v)
    gradients = torch.ops.sandboxes.narrow_attention_backward(grad, q, k, v, out, top, inverse)
    assert b"".join(t.numpy().tobytes() for t in (out, top, inverse, *gradients)) == outputs[0]


def test_the_blocked_kernel_on_request(monkeypatch):
    monkeypatch.setenv("SANDBOXES_ATTENTION", "blocked")
    assert attention.narrow_kernels() is None
    monkeypatch.setenv("SANDBOXES_ATTENTION", "compiled")
    assert attention.narrow_kernels() is attention.built_narrow_kernels()
