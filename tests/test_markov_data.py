"""The Markov chain generators: frequencies match the kernel, bad kernels are refused."""

import numpy as np
import pytest
import torch

from sandboxes.data.markov import (
    MarkovChain,
    binary_kernel,
    chain_states,
    check_kernel,
    inverse_cdf,
    stationary_law,
    symmetric_kernel,
)


@pytest.mark.parametrize("p, q", [(0.5, 0.8), (0.2, 0.3), (0.9, 0.05)])
def test_empirical_transition_frequencies_match_the_kernel(p, q):
    seqs = MarkovChain.binary(p, q, 200).sequences(400, torch.Generator().manual_seed(0)).numpy()
    current, nxt = seqs[:, :-1].ravel(), seqs[:, 1:].ravel()
    for state, leave in ((0, p), (1, q)):
        observed = (nxt[current == state] != state).mean()
        n = (current == state).sum()
        # five standard errors of a binomial proportion: fails by chance with probability < 1e-6
        assert abs(observed - leave) < 5 * np.sqrt(leave * (1 - leave) / n)


def test_chains_start_from_the_stationary_law():
    chain = MarkovChain(symmetric_kernel(3, 0.4), 1)
    first = chain.sequences(20000, torch.Generator().manual_seed(1))[:, 0].numpy()
    freq = np.bincount(first, minlength=3) / len(first)
    assert np.abs(freq - 1 / 3).max() < 5 * np.sqrt(2 / 9 / len(first))


def test_stationary_law_solves_pi_equals_pi_p():
    kernel = binary_kernel(0.5, 0.8)
    pi = stationary_law(kernel)
    assert np.allclose(pi @ kernel, pi, atol=1e-14)
    assert np.allclose(pi, [0.8 / 1.3, 0.5 / 1.3], atol=1e-14)


def test_same_generator_seed_gives_the_same_sequences():
    chain = MarkovChain.binary(0.3, 0.6, 50)
    a = chain.sequences(8, torch.Generator().manual_seed(3))
    b = chain.sequences(8, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_sampling_many_chains_at_once_gives_each_chain_what_it_samples_alone():
    chains = [MarkovChain(binary_kernel(p, q), 30) for p, q in ((0.5, 0.8), (0.2, 0.3), (0.9, 0.05))]
    x, y = MarkovChain.sample_members(chains, 7, [torch.Generator().manual_seed(s) for s in (4, 5, 6)])
    for k, (chain, seed) in enumerate(zip(chains, (4, 5, 6))):
        alone = chain.sample(7, torch.Generator().manual_seed(seed))
        assert torch.equal(x[k], alone[0]) and torch.equal(y[k], alone[1])


def test_chains_of_different_lengths_are_not_sampled_together():
    chains = [MarkovChain.binary(0.5, 0.8, 30), MarkovChain.binary(0.5, 0.8, 31)]
    with pytest.raises(ValueError, match="share their length"):
        MarkovChain.sample_members(chains, 2, [torch.Generator(), torch.Generator()])


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5])
def test_probability_outside_the_open_unit_interval_is_refused(p):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        binary_kernel(p, 0.5)


@pytest.mark.parametrize(
    "kernel, message",
    [
        ([[0.5, 0.6], [0.5, 0.5]], "sum to 1"),
        ([[1.2, -0.2], [0.5, 0.5]], "negative"),
        ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "square"),
    ],
)
def test_non_stochastic_matrices_are_refused(kernel, message):
    with pytest.raises(ValueError, match=message):
        check_kernel(np.array(kernel))


def _draw_step_by_step(start, edges, uniform):
    """The recursion as written in the definition: each state drawn from the kernel row of the one before."""
    member = np.arange(len(edges))[:, None]
    out = np.empty(uniform.shape, dtype=np.int64)
    out[:, :, 0] = inverse_cdf(uniform[:, :, 0], start[:, None, :])
    for t in range(1, uniform.shape[2]):
        out[:, :, t] = inverse_cdf(uniform[:, :, t], edges[member, out[:, :, t - 1]])
    return out


@pytest.mark.parametrize("members, rows, length, states", [(1, 16, 1025, 2), (3, 5, 7, 4), (2, 3, 1, 3), (2, 1, 40, 7)])
def test_the_tabulated_recursion_draws_the_states_of_the_step_by_step_one(members, rows, length, states):
    rng = np.random.default_rng(length)
    edges = np.cumsum(rng.dirichlet(np.ones(states), size=(members, states)), axis=-1)[..., :-1]
    start = np.cumsum(rng.dirichlet(np.ones(states), size=members), axis=-1)[:, :-1]
    uniform = rng.random((members, rows, length))
    np.testing.assert_array_equal(chain_states(start, edges, uniform), _draw_step_by_step(start, edges, uniform))
