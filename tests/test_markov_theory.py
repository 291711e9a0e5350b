"""Chapter 1 theory against brute force: entropies, constructions, Hessians, the reduced flow."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.special import expit

from sandboxes.data.markov import binary_kernel, stationary_law, symmetric_kernel
from sandboxes.theory import markov as theory
from sandboxes.theory.markov_flow import ReducedFlow

EXACT = 1e-10  # float64 round-off; every quantity below is exact mathematics
CHAINS = [(0.5, 0.8), (0.2, 0.3), (0.7, 0.6), (0.1, 0.15)]


def brute_force_entropy_rate(kernel: np.ndarray, n: int) -> float:
    """H(x_{n+1} | x_1..x_n) by summing over all sequences: equals the entropy rate for a first-order chain."""
    seqs, probs = theory.all_sequences(kernel, n)
    total = 0.0
    for seq, prob in zip(seqs.numpy(), probs.numpy()):
        total -= prob * math.log(kernel[seq[-2], seq[-1]])
    return total


@pytest.mark.parametrize("p, q", CHAINS)
def test_entropy_rate_matches_brute_force_conditional_entropy(p, q):
    kernel = binary_kernel(p, q)
    assert abs(theory.entropy_rate(kernel) - brute_force_entropy_rate(kernel, 5)) < EXACT


def test_entropy_values_match_the_paper_examples():
    # Makkuva et al. report 0.619 / 0.666 for (0.5, 0.8) and 0.545 / 0.673 for (0.2, 0.3)
    for (p, q), (rate, unigram) in {(0.5, 0.8): (0.619, 0.666), (0.2, 0.3): (0.545, 0.673)}.items():
        kernel = binary_kernel(p, q)
        assert round(theory.entropy_rate(kernel), 3) == rate
        assert round(theory.unigram_entropy(kernel), 3) == unigram


@pytest.mark.parametrize("p, q", CHAINS)
def test_gap_is_the_mutual_information_of_consecutive_symbols(p, q):
    kernel = binary_kernel(p, q)
    joint = stationary_law(kernel)[:, None] * kernel
    marginal = joint.sum(axis=0)
    mutual = float((joint * np.log(joint / np.outer(joint.sum(axis=1), marginal))).sum())
    assert abs(theory.unigram_entropy(kernel) - theory.entropy_rate(kernel) - mutual) < EXACT


def test_gap_vanishes_when_p_plus_q_is_one():
    kernel = binary_kernel(0.3, 0.7)
    assert abs(theory.unigram_entropy(kernel) - theory.entropy_rate(kernel)) < EXACT


@pytest.mark.parametrize("p, q", CHAINS)
@pytest.mark.parametrize("tied", [True, False])
def test_global_minimum_construction_predicts_the_kernel_with_zero_gradient(p, q, tied):
    kernel = binary_kernel(p, q)
    model = theory.global_minimum_point(p, q, 3, 5, tied)
    x = torch.tensor(list(itertools.product((0, 1), repeat=5)))
    prob_one = model(x).softmax(-1)[..., 1]
    expected = torch.where(x == 0, torch.tensor(p, dtype=torch.float64), torch.tensor(1 - q, dtype=torch.float64))
    assert torch.allclose(prob_one, expected, atol=EXACT, rtol=0)
    loss = theory.PopulationLoss(model, kernel, 5)
    assert abs(loss.value() - theory.entropy_rate(kernel)) < EXACT
    assert float(loss.gradient().abs().max()) < EXACT


@pytest.mark.parametrize("p, q", CHAINS)
@pytest.mark.parametrize("tied", [True, False])
def test_unigram_point_predicts_pi_with_loss_h_pi_and_zero_gradient(p, q, tied):
    kernel = binary_kernel(p, q)
    model = theory.unigram_point(p, q, 3, 5, tied)
    loss = theory.PopulationLoss(model, kernel, 5)
    assert abs(loss.value() - theory.unigram_entropy(kernel)) < EXACT
    assert float(loss.gradient().abs().max()) < EXACT


@pytest.mark.parametrize("p, q", CHAINS)
@pytest.mark.parametrize("tied", [True, False])
def test_hessian_block_at_unigram_point_matches_the_closed_form(p, q, tied):
    spectra = theory.hessian_at_unigram_point(p, q, 2, 4, tied)
    assert np.allclose(spectra["block"], theory.predicted_block_spectrum(p, q, 2, tied), atol=EXACT, rtol=0)


def test_tied_hessian_is_positive_definite_only_when_p_plus_q_exceeds_one():
    assert theory.hessian_at_unigram_point(0.5, 0.8, 2, 4, True)["block"].min() > 0
    assert theory.hessian_at_unigram_point(0.2, 0.3, 2, 4, True)["block"].min() < 0
    assert theory.hessian_at_unigram_point(0.5, 0.8, 2, 4, True)["full"].min() > -EXACT


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.2, 0.3)])
def test_untied_hessian_is_indefinite(p, q):
    block = theory.hessian_at_unigram_point(p, q, 2, 4, False)["block"]
    assert block.min() < -EXACT and block.max() > EXACT


def test_curvature_has_the_sign_of_p_plus_q_minus_one():
    assert theory.curvature(0.5, 0.8) > 0 > theory.curvature(0.2, 0.3)
    assert theory.curvature(0.4, 0.6) == 0


def test_excess_loss_is_zero_at_the_kernel_and_the_gap_at_the_unigram():
    kernel = binary_kernel(0.5, 0.8)
    seqs, probs = theory.all_sequences(kernel, 4)
    inputs = seqs[:, :-1]
    bigram = torch.log(torch.as_tensor(kernel))[inputs]
    unigram = torch.log(torch.as_tensor(stationary_law(kernel))).expand(*inputs.shape, 2)
    assert float(theory.excess_loss(bigram, inputs, kernel).abs().max()) < EXACT
    gap = theory.unigram_entropy(kernel) - theory.entropy_rate(kernel)
    assert abs(float((theory.excess_loss(unigram, inputs, kernel) * probs).sum()) - gap) < EXACT


def test_multistate_entropies_match_closed_forms():
    kernel = symmetric_kernel(5, 0.3)
    expected_rate = -(0.7 * math.log(0.7) + 0.3 * math.log(0.3 / 4))
    assert abs(theory.entropy_rate(kernel) - expected_rate) < EXACT
    assert abs(theory.unigram_entropy(kernel) - math.log(5)) < EXACT


class TestReducedFlow:
    @pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.2, 0.3)])
    def test_two_scalar_loss_equals_the_gpt_population_loss(self, p, q):
        flow = ReducedFlow(p, q)
        for e, w in [(0.3, 0.4), (1.1, -0.9), (0.7, 0.0)]:
            gpt = theory.PopulationLoss(flow.gpt_weights(e, w, 3, 4), binary_kernel(p, q), 4)
            assert abs(gpt.value() - flow.loss(e, w)) < EXACT

    def test_velocity_is_minus_the_gradient(self):
        flow, h = ReducedFlow(0.5, 0.8), 1e-6
        e, w = 0.6, -0.3
        grad = (
            (flow.loss(e + h, w) - flow.loss(e - h, w)) / (2 * h),
            (flow.loss(e, w + h) - flow.loss(e, w - h)) / (2 * h),
        )
        # central differences with h = 1e-6 are accurate to about h^2 plus round-off / h ~ 1e-10
        assert np.allclose(flow.velocity(e, w), [-grad[0], -grad[1]], atol=1e-8)

    def test_energy_is_conserved_along_a_trajectory(self):
        flow = ReducedFlow(0.2, 0.3)
        path = flow.trajectory(0.4, 0.3)
        energy = [flow.energy(e, w) for _, e, w in path]
        assert np.ptp(energy) < 1e-7  # integrator tolerance 1e-10 accumulated over t = 400

    def test_global_minima_lie_on_the_optimal_slope_curve(self):
        flow = ReducedFlow(0.5, 0.8)
        e = 1.3
        w_abs_w = (flow.optimal_slope / e**2 - 1) / 2
        w = math.copysign(math.sqrt(abs(w_abs_w)), w_abs_w)
        assert abs(flow.loss(e, w) - theory.entropy_rate(binary_kernel(0.5, 0.8))) < EXACT

    def test_optimal_bias_zeroes_the_bias_derivative(self):
        flow = ReducedFlow(0.5, 0.8)
        for u in (-2.0, 0.0, 1.5):
            b = flow.optimal_bias(u)
            db = (flow.loss_at(u, b + 1e-6) - flow.loss_at(u, b - 1e-6)) / 2e-6
            assert abs(db) < 1e-8

    def test_axis_stability_switches_at_minus_one_over_root_two(self):
        for p, q in [(0.5, 0.8), (0.2, 0.3)]:
            flow = ReducedFlow(p, q)
            assert flow.axis_stable(-0.70) != flow.axis_stable(-0.72)
        assert ReducedFlow(0.5, 0.8).axis_stable(0.0) and not ReducedFlow(0.2, 0.3).axis_stable(0.0)


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.2, 0.3), (0.4, 0.4), (0.9, 0.1), (0.05, 0.95)])
def test_the_reduced_models_optimal_bias_zeroes_its_derivative_at_any_slope(p, q):
    # slopes of +-61 come from starts of std 2 (a reader's value that crashed the old closed form); 800 overflows e^u
    flow = ReducedFlow(p, q)
    for u in (-800.0, -61.0, -1.0, 0.0, 1.0, 61.0, 800.0):
        b = flow.optimal_bias(u)
        derivative = (1 - flow.pi1) * expit(b) + flow.pi1 * expit(u + b) - flow.pi1
        assert abs(derivative) < 1e-12, u
