"""Exact theory of one-layer transformers on Markov chains (Makkuva et al., "Attention with Markov").

Closed forms (entropy rate, unigram entropy, the curvature ``c`` that decides the sign of the
Hessian), the explicit parameter points of Theorems 1 and 2 written into the book's
:class:`~sandboxes.model.GPT`, and the exact population loss of any model on short sequences,
by enumerating every sequence with its probability. Nothing here trains.

Our GPT has a two-row embedding table and a two-row output layer with bias. Fixing row 0 of
each to zero gives back the paper's model exactly: its ``e`` is ``wte[1]``, its linear weight
``a`` is ``head.weight[1]`` and its bias ``b`` is ``head.bias[1]``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..data.markov import binary_kernel, check_kernel, stationary_law
from ..model import GPT, GPTConfig, zero_gpt


def entropy_rate(kernel: np.ndarray) -> float:
    """``sum_i pi_i H(P_i)``: the loss of the bigram predictor, the global minimum."""
    kernel = check_kernel(kernel)
    pi = stationary_law(kernel)
    logs = np.where(kernel > 0, np.log(np.where(kernel > 0, kernel, 1.0)), 0.0)
    return float(-(pi[:, None] * kernel * logs).sum())


def unigram_entropy(kernel: np.ndarray) -> float:
    """``H(pi)``: the loss of predicting the stationary law regardless of the input."""
    pi = stationary_law(check_kernel(kernel))
    return float(-(pi * np.log(pi)).sum())


def curvature(p: float, q: float) -> float:
    """``c = E[(pi_1 - x_{n+1}) x_n] = pq(p+q-1)/(p+q)^2``, the loss's rate in ``||e||^2`` at ``e=0``.

    Its sign is the sign of ``p+q-1``; it sets the Hessian at the unigram point.
    """
    binary_kernel(p, q)
    return p * q * (p + q - 1) / (p + q) ** 2


def kernel_log_odds_gap(p: float, q: float) -> float:
    """``ln[(1-p)(1-q)/(pq)]``: the logit slope in ``x_n`` that a bigram predictor needs."""
    return math.log((1 - p) * (1 - q) / (p * q))


def binary_config(d_model: int, length: int, tied: bool, d_mlp: int | None = None) -> GPTConfig:
    """The paper's architecture: one layer, one head, ReLU MLP, no layer norm, no inner biases."""
    return GPTConfig(
        vocab_size=2,
        block_size=length,
        n_layer=1,
        n_head=1,
        d_model=d_model,
        d_mlp=d_mlp,
        tied=tied,
        positional="learned",
        layer_norm=False,
        activation="relu",
        bias=False,
        head_bias=True,
    )


def unigram_point(p: float, q: float, d_model: int, length: int, tied: bool) -> GPT:
    """``theta_pi`` of Theorem 2: ``e = a = 0`` and ``b = ln(p/q)``, so the model predicts ``pi_1``."""
    binary_kernel(p, q)
    model = zero_gpt(binary_config(d_model, length, tied))
    with torch.no_grad():
        model.head.bias[1] = math.log(p / q)
    return model


def global_minimum_point(p: float, q: float, d_model: int, length: int, tied: bool = True) -> GPT:
    """``theta_*`` of Theorem 1: a model whose prediction is the Markov kernel at every position.

    Attention is switched off by zero value/output weights, so the prediction depends on
    ``x_n`` only. For ``p+q <= 1`` the slope ``||e||^2 = ln[(1-p)(1-q)/(pq)] >= 0`` comes from
    the embedding alone; for ``p+q > 1`` it is negative, which a tied ``||e||^2`` cannot be, so
    the ReLU MLP adds the missing negative part (the paper's appendix B.2 route, in our words:
    centre the embedding with ``p_n = -e/2``, let the MLP fire on ``x_n = 1`` only, and scale
    its output by ``m = 2(gap - 1)``).
    """
    binary_kernel(p, q)
    gap = kernel_log_odds_gap(p, q)
    model = zero_gpt(binary_config(d_model, length, tied))
    u = torch.zeros(d_model, dtype=torch.float64)
    u[0] = 1.0
    with torch.no_grad():
        if p + q <= 1:
            model.wte.weight[1] = math.sqrt(gap) * u
            model.head.bias[1] = math.log(p / (1 - p))
        else:
            model.wte.weight[1] = u
            model.wpe[:] = -0.5 * u
            model.blocks[0].mlp.fc.weight[0] = u
            model.blocks[0].mlp.proj.weight[:, 0] = 2 * (gap - 1) * u
            model.head.bias[1] = math.log(p / (1 - p)) + 0.5
        if not tied:
            model.head.weight[1] = model.wte.weight[1]
    return model


def all_sequences(kernel: np.ndarray, length: int) -> tuple[Tensor, Tensor]:
    """Every sequence of ``length + 1`` states and its probability under the stationary chain."""
    kernel = check_kernel(kernel)
    pi = stationary_law(kernel)
    n = kernel.shape[0]
    seqs = np.array(list(itertools.product(range(n), repeat=length + 1)))
    probs = pi[seqs[:, 0]] * np.prod(kernel[seqs[:, :-1], seqs[:, 1:]], axis=1)
    return torch.as_tensor(seqs), torch.as_tensor(probs, dtype=torch.float64)


class PopulationLoss:
    """The exact population loss of a model as a function of its flattened parameters.

    Exact because it sums over all ``n_states ** (length + 1)`` sequences with their true
    probabilities; usable for gradients and Hessians by autograd.
    """

    def __init__(self, model: GPT, kernel: np.ndarray, length: int) -> None:
        self.model = model
        self.names = [name for name, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self.sizes = [p.numel() for _, p in model.named_parameters()]
        seqs, self.probs = all_sequences(kernel, length)
        self.inputs, self.targets = seqs[:, :-1], seqs[:, 1:]

    def flat(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()])

    def slices(self) -> dict[str, slice]:
        """Where each named parameter sits in the flat vector."""
        offsets = np.cumsum([0, *self.sizes])
        return {n: slice(int(a), int(b)) for n, a, b in zip(self.names, offsets[:-1], offsets[1:])}

    def __call__(self, flat: Tensor) -> Tensor:
        chunks = torch.split(flat, self.sizes)
        params = {n: c.reshape(s) for n, c, s in zip(self.names, chunks, self.shapes)}
        logits = torch.func.functional_call(self.model, params, (self.inputs,))
        logp = logits.log_softmax(dim=-1).gather(-1, self.targets[..., None]).squeeze(-1)
        return -(self.probs * logp.mean(dim=1)).sum()

    def value(self) -> float:
        return float(self(self.flat()))

    def gradient(self) -> Tensor:
        flat = self.flat().requires_grad_(True)
        (grad,) = torch.autograd.grad(self(flat), flat)
        return grad

    def hessian(self, block: slice | None = None) -> Tensor:
        """The exact Hessian of the population loss, or its ``block`` of the flat parameters alone (the others held,
        one backward pass per entry of the block instead of per parameter); attention by its plain formula (the
        fused kernel has no second derivative)."""
        flat = self.flat()
        block = slice(0, len(flat)) if block is None else block

        def restricted(part: Tensor) -> Tensor:
            return self(torch.cat([flat[: block.start], part, flat[block.stop :]]))

        with sdpa_kernel(SDPBackend.MATH):
            return torch.autograd.functional.hessian(restricted, flat[block])


def paper_block(loss: PopulationLoss, tied: bool) -> list[int]:
    """Indices of the paper's ``(e, a, b)`` parameters: ``wte[1]``, ``head.weight[1]`` if untied, ``head.bias[1]``."""
    where = loss.slices()
    d = loss.model.config.d_model
    e = list(range(where["wte.weight"].start + d, where["wte.weight"].start + 2 * d))
    a = [] if tied else list(range(where["head.weight"].start + d, where["head.weight"].start + 2 * d))
    return e + a + [where["head.bias"].start + 1]


def predicted_block_spectrum(p: float, q: float, d_model: int, tied: bool) -> np.ndarray:
    """Eigenvalues of the Hessian at ``theta_pi`` on the paper's ``(e, a, b)`` block, sorted.

    Tied: ``H = diag(2c I_d, pi_0 pi_1)``, positive definite iff ``p+q > 1`` (Theorem 2).
    Untied: the ``(e, a)`` part is ``[[0, cI], [cI, 0]]`` with eigenvalues ``+-c``, indefinite
    whenever ``p+q != 1`` (Theorem 3).
    """
    c = curvature(p, q)
    pi0, pi1 = stationary_law(binary_kernel(p, q))
    values = [2 * c] * d_model if tied else [c] * d_model + [-c] * d_model
    return np.sort(np.array(values + [pi0 * pi1]))


def hessian_at_unigram_point(p: float, q: float, d_model: int, length: int, tied: bool) -> dict[str, np.ndarray]:
    """Autograd Hessian of the exact population loss at ``theta_pi``: block and full spectra."""
    model = unigram_point(p, q, d_model, length, tied)
    loss = PopulationLoss(model, binary_kernel(p, q), length)
    hess = loss.hessian()
    block = paper_block(loss, tied)
    return {
        "block": np.sort(torch.linalg.eigvalsh(hess[block][:, block]).numpy()),
        "full": np.sort(torch.linalg.eigvalsh(hess).numpy()),
    }


def loss_changes(loss: PopulationLoss, directions: Tensor, radii: tuple[float, ...]) -> np.ndarray:
    """``L(theta + r u) - L(theta)`` for every unit direction ``u`` (a row of ``directions``) and radius ``r``.

    The direct test of a local minimum, which a Hessian with zero modes cannot give.
    """
    base = loss.flat()
    with torch.no_grad():
        start = loss(base)
        moved = [torch.func.vmap(loss)(base + r * directions) - start for r in radii]  # all directions at once
    return torch.stack(moved, dim=1).numpy()


def random_directions(n: int, dim: int, generator: torch.Generator) -> Tensor:
    """``n`` unit vectors in ``dim`` dimensions, uniform on the sphere (float64)."""
    gauss = torch.randn(n, dim, generator=generator, dtype=torch.float64)
    return gauss / gauss.norm(dim=1, keepdim=True)


def kernel_unigram_point(kernel: np.ndarray, d_model: int, length: int) -> GPT:
    """The tied unigram point of a chain with any number of states: zero weights, bias ``log pi``."""
    kernel = check_kernel(kernel)
    model = zero_gpt(replace(binary_config(d_model, length, tied=True), vocab_size=kernel.shape[0]))
    with torch.no_grad():
        model.head.bias[:] = torch.as_tensor(np.log(stationary_law(kernel)))
    return model


def symmetric_block_eigenvalue(n_states: int, p: float) -> float:
    """The tied Hessian's eigenvalue at the unigram point of the symmetric chain, on embeddings orthogonal to 1.

    The loss moves with ``sum_jk pi_j (pi_k - P_jk) <e_j, e_k>`` near ``e = 0``; for the
    symmetric chain that form is ``(1/n)(J/n - P)``, whose eigenvalue off the all-ones vector is
    ``(2/n)(n p / (n - 1) - 1)`` (the Hessian doubles it): it changes sign at ``p* = (n - 1)/n``,
    where the chain's mutual information is 0, as ``p + q = 1`` does for the binary chain.
    """
    return 2 / n_states * (n_states * p / (n_states - 1) - 1)


def embedding_block_spectrum(kernel: np.ndarray, d_model: int, length: int) -> np.ndarray:
    """Autograd eigenvalues of the exact loss's Hessian on the embedding table at the tied unigram point."""
    loss = PopulationLoss(kernel_unigram_point(kernel, d_model, length), kernel, length)
    return np.sort(torch.linalg.eigvalsh(loss.hessian(loss.slices()["wte.weight"])).numpy())


def excess_loss(logits: Tensor, inputs: Tensor, kernel: np.ndarray) -> Tensor:
    """Per-sequence mean of ``KL(P(. | x_n) || model(. | x_1..x_n))`` over positions.

    The loss minus the entropy rate, averaged exactly over the next symbol instead of over a
    sampled one, so it is 0 at the bigram and ``H(pi) - H`` at the unigram with no target noise.
    """
    target = torch.as_tensor(check_kernel(kernel), dtype=logits.dtype)[inputs]
    logq = logits.log_softmax(dim=-1)
    logp = torch.where(target > 0, target.clamp_min(1e-300).log(), torch.zeros_like(target))
    return (target * (logp - logq)).sum(dim=-1).mean(dim=-1)


def top_share(singular_values: np.ndarray) -> np.ndarray:
    """The share of a matrix's squared (Frobenius) norm in its top singular direction, per row of singular values:
    1 for a rank-one matrix; for a random n x m one (n >= m, large) about (1 + sqrt(m / n))^2 / m (Marchenko and
    Pastur), 0.28 for the MLP's 32 x 8 at d_model = 8."""
    squared = np.square(np.asarray(singular_values, dtype=float))
    return squared.max(axis=-1) / squared.sum(axis=-1)
