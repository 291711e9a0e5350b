"""The reduced gradient flow of a tied one-layer transformer on a binary Markov chain.

Trained models end with rank-one weights (the paper's appendix D). Writing them with one unit
direction ``u`` and two scalars ``(e, w)``, attention off (the ``a = 0`` slice of the slides):

* token embedding ``wte[1] = e u``, ``wte[0] = 0``, no positional part, so ``y_n = e x_n u``;
* a balanced rank-one ReLU MLP, ``fc = sqrt2 |w| v u^T`` and ``proj = sqrt2 w u v^T``
  (gradient flow keeps the two layers' norms equal, hence one scalar for both); for ``e >= 0``
  it adds ``2 w|w| e x_n u``, firing only on ``x_n = 1``;
* tied output weight ``e u`` and bias ``b``.

The logit is then ``<e u, z_n> + b = u(e, w) x_n + b`` with slope ``u(e, w) = e^2 (1 + 2 w|w|)``.
With ``b`` at its optimum for each slope, the population loss is a function ``l(u)`` of the
slope alone, and the flow ``d(e, w)/dt = -grad l(u(e, w))`` reads

    de/dt = -l'(u) 2e (1 + 2w|w|),   dw/dt = -l'(u) 4 e^2 |w|.

Consequences, each checked in code: ``E = e^2 - w^2 - sign(w) ln|w|`` is conserved (its time
derivative cancels term by term), so trajectories are level sets of ``E``; the axis ``e = 0`` is
a line of stationary points whose stability in ``e`` has the sign of ``l'(0)(1 + 2w|w|)``, with
``l'(0) = c`` of :func:`sandboxes.theory.markov.curvature`; the switch is at ``w = -1/sqrt2``;
the global minima lie on ``e^2 (1 + 2w|w|) = ln[(1-p)(1-q)/(pq)]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from scipy.integrate import solve_ivp

from ..data.markov import binary_kernel, stationary_law
from ..model import GPT, zero_gpt
from .markov import binary_config, kernel_log_odds_gap


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@dataclass(frozen=True)
class ReducedFlow:
    """Loss, gradient, energy and trajectories of the two-scalar model for a ``(p, q)`` chain."""

    p: float
    q: float

    def __post_init__(self) -> None:
        binary_kernel(self.p, self.q)

    @cached_property
    def pi1(self) -> float:
        """The stationary chance of a one, read at every step of the flow: computed once."""
        return float(stationary_law(binary_kernel(self.p, self.q))[1])

    @property
    def optimal_slope(self) -> float:
        return kernel_log_odds_gap(self.p, self.q)

    @staticmethod
    def slope(e: float, w: float) -> float:
        return e * e * (1 + 2 * w * abs(w))

    def optimal_bias(self, u: float) -> float:
        """The bias that zeroes ``dL/db = pi_0 sigma(b) + pi_1 sigma(u + b) - pi_1``, in closed form.

        With ``s = e^b`` and ``k = e^u`` the condition is the quadratic
        ``pi_0 k s^2 + (pi_0 - pi_1) s - pi_1 = 0``, whose positive root is ``s``, taken in whichever of its two
        algebraic forms avoids cancellation (large slopes ``u`` otherwise lose every digit).
        """
        pi1 = self.pi1
        pi0 = 1 - pi1
        B = pi0 - pi1
        if B == 0:
            return 0.5 * (math.log(pi1 / pi0) - u)  # s^2 = pi1 / (pi0 k)
        if u > 0:  # scaled by e^(-u/2) so that e^u never overflows
            h = math.exp(-u / 2)
            root = math.sqrt((B * h) ** 2 + 4 * pi0 * pi1)
            scaled = (root - B * h) / (2 * pi0) if B < 0 else 2 * pi1 / (B * h + root)
            return math.log(scaled) - u / 2
        root = math.sqrt(B * B + 4 * pi0 * pi1 * math.exp(u))
        # each form adds two positive terms: no cancellation, and no division by an underflowed e^u
        return math.log(root - B) - math.log(2 * pi0) - u if B < 0 else math.log(2 * pi1 / (B + root))

    def loss_at(self, u: float, b: float) -> float:
        """Exact population cross-entropy of the predictor ``sigma(u x_n + b)``."""
        p, q, pi1 = self.p, self.q, self.pi1
        f0, f1 = _sigmoid(b), _sigmoid(u + b)
        return -(
            (1 - pi1) * (p * math.log(f0) + (1 - p) * math.log(1 - f0))
            + pi1 * ((1 - q) * math.log(f1) + q * math.log(1 - f1))
        )

    def loss(self, e: float, w: float) -> float:
        u = self.slope(e, w)
        return self.loss_at(u, self.optimal_bias(u))

    def dloss_dslope(self, u: float) -> float:
        """``l'(u) = E[(sigma(u x + b*) - x') x] = pi_1 (sigma(u + b*) - (1 - q))`` (envelope theorem)."""
        return self.pi1 * (_sigmoid(u + self.optimal_bias(u)) - (1 - self.q))

    def velocity(self, e: float, w: float) -> tuple[float, float]:
        g = self.dloss_dslope(self.slope(e, w))
        return -g * 2 * e * (1 + 2 * w * abs(w)), -g * 4 * e * e * abs(w)

    @staticmethod
    def energy(e: float, w: float) -> float:
        """``E = e^2 - w^2 - sign(w) ln|w|``, constant along every trajectory with ``w != 0``."""
        return e * e - w * w - math.copysign(1.0, w) * math.log(abs(w))

    def trajectory(
        self, e0: float, w0: float, t_max: float = 400.0, n_points: int = 200, rtol: float = 1e-10
    ) -> np.ndarray:
        """Integrate the flow from ``(e0, w0)``; rows are ``(t, e, w)``."""
        sol = solve_ivp(
            lambda t, y: self.velocity(y[0], y[1]),
            (0.0, t_max),
            [e0, w0],
            t_eval=np.linspace(0.0, t_max, n_points),
            rtol=rtol,
            atol=rtol * 1e-2,
        )
        return np.column_stack([sol.t, sol.y.T])

    def reaches_global_minimum(self, e0: float, w0: float, t_max: float = 400.0) -> bool:
        """Whether the flow from ``(e0, w0)`` ends at the bigram loss rather than the unigram one."""
        _, e, w = self.trajectory(e0, w0, t_max, 2, rtol=1e-6)[-1]
        global_loss = self.loss_at(self.optimal_slope, self.optimal_bias(self.optimal_slope))
        unigram_loss = self.loss_at(0.0, self.optimal_bias(0.0))
        return abs(self.loss(e, w) - global_loss) < abs(self.loss(e, w) - unigram_loss)

    def axis_stable(self, w: float) -> bool:
        """Whether the stationary point ``(0, w)`` attracts in the ``e`` direction."""
        return self.dloss_dslope(0.0) * (1 + 2 * w * abs(w)) > 0

    def gpt_weights(self, e: float, w: float, d_model: int, length: int) -> GPT:
        """The full :class:`~sandboxes.model.GPT` (tied, float64) that this ``(e, w)`` stands for."""
        model = zero_gpt(binary_config(d_model, length, tied=True))
        u = torch.zeros(d_model, dtype=torch.float64)
        u[0] = 1.0
        with torch.no_grad():
            model.wte.weight[1] = abs(e) * u
            model.blocks[0].mlp.fc.weight[0] = math.sqrt(2) * abs(w) * u
            model.blocks[0].mlp.proj.weight[:, 0] = math.sqrt(2) * w * u
            model.head.bias[1] = self.optimal_bias(self.slope(e, w))
        return model
