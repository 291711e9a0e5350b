"""The folding attention kernel: PyTorch's numbers, alone and vmapped, forward and backward."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from sandboxes.attention import causal_attention


def _recency(T: int, slope: float) -> torch.Tensor:
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return (-slope * distance.float()).masked_fill(distance < 0, float("-inf"))


@pytest.mark.parametrize("bias", [None, _recency(24, 0.3)], ids=["causal", "recency"])
def test_vmapped_members_fold_into_the_batch_with_pytorchs_numbers_and_gradients(bias):
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 3, 2, 24, 8, requires_grad=True) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None)
    folded = vmap(lambda a, b, c: causal_attention(a, b, c, bias))(q, k, v)
    torch.testing.assert_close(folded, expected)
    grad = torch.randn_like(expected)
    for mine, theirs in zip(torch.autograd.grad(folded, (q, k, v), grad), torch.autograd.grad(expected, (q, k, v), grad)):
        torch.testing.assert_close(mine, theirs)


def test_a_member_alone_gets_what_it_gets_in_the_ensemble():
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
