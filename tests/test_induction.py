"""In-context Markov chains and their theory: the sampler, the loss levels and the chi-square information."""

import itertools

import numpy as np
import pytest
import torch

from sandboxes.data.incontext import InContextMarkov, chain_parents, tree_parents
from sandboxes.theory.induction import (bayes_predictive, chi2_information, count_predictive, induction_head,
                                        joint_laws, loss_levels, predictor_loss, successor_average, unigram_predictive)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_parents_come_before_their_children():
    assert chain_parents(4) == ((), (0,), (1,), (2,), (3,))
    assert chain_parents(4, order=2) == ((), (), (0, 1), (1, 2), (2, 3))
    tree = tree_parents(50, window=5, seed=3)
    assert tree[0] == () and all(i - 5 <= p < i for i, (p,) in enumerate(tree[1:], 1))


@pytest.mark.parametrize("bad", [dict(n_states=1), dict(alpha=0.0), dict(parents=((), (1,)))])
def test_a_bad_task_is_refused(bad):
    with pytest.raises(ValueError):
        InContextMarkov(**{"n_states": 3, "alpha": 1.0, "parents": chain_parents(4), **bad})


def test_kernels_are_dirichlet_rows():
    kernels = InContextMarkov.chain(3, 0.5, 8).kernels(20_000, _gen())
    assert np.allclose(kernels.sum(axis=-1), 1.0)
    # Dirichlet(alpha, ..., alpha): mean 1/k, variance (1/k)(1 - 1/k) / (k alpha + 1)
    assert np.abs(kernels.mean(axis=0) - 1 / 3).max() < 5 * np.sqrt(2 / 9 / 2.5 / 20_000)
    assert kernels.var(axis=0).mean() == pytest.approx(2 / 9 / 2.5, rel=0.05)


@pytest.mark.parametrize("task", [InContextMarkov.chain(3, 1.0, 12), InContextMarkov.chain(2, 1.0, 12, order=2),
                                  InContextMarkov(3, 1.0, tree_parents(12, 4, seed=1))], ids=["chain", "order2", "tree"])
def test_each_position_follows_its_own_sequences_kernel(task):
    seq, kernels = task.sequences_and_kernels(20_000, _gen(1))
    seq = seq.numpy()
    rows = np.arange(len(seq))
    for i in range(1, task.length + 1):
        if len(task.parents[i]) < task.order:
            continue
        chance = kernels[rows, task.contexts(seq, i)]  # the law position i was drawn from
        surprise = np.eye(task.n_states)[seq[:, i]] - chance  # mean zero if the sampler follows it
        assert np.abs(surprise.mean(axis=0)).max() < 5 * surprise.std(axis=0).max() / np.sqrt(len(seq))


def test_the_bayes_predictor_counts_the_context_in_the_sequence_so_far():
    task = InContextMarkov.chain(2, 1.0, 4)
    probs = bayes_predictive(task, np.array([[0, 1, 0, 1, 0]]))
    assert probs[0, 0] == pytest.approx([0.5, 0.5])  # nothing seen from 0
    assert probs[0, 2] == pytest.approx([1 / 3, 2 / 3])  # 0 -> 1 once: (1 + 1) / (1 + 2)
    assert probs[0, 3] == pytest.approx([2 / 3, 1 / 3])  # 1 -> 0 once
    assert np.allclose(unigram_predictive(task, np.array([[0, 1, 0, 1, 0]]))[0, 2], [3 / 5, 2 / 5])


def test_the_levels_are_ordered_uniform_unigram_bayes():
    levels = loss_levels(InContextMarkov.chain(3, 1.0, 32), 4000, seed=0)
    assert levels["uniform"].loss == pytest.approx(np.log(3)) and levels["uniform"].std_error == 0
    for upper, lower in (("uniform", "unigram"), ("unigram", "bayes")):
        gap = levels[upper].loss - levels[lower].loss
        assert gap > 5 * np.hypot(levels[upper].std_error, levels[lower].std_error)


def test_the_posterior_predictive_beats_a_wrongly_smoothed_one():
    task = InContextMarkov.chain(3, 1.0, 32)
    seq = task.sequences(4000, _gen(2)).numpy()
    right = predictor_loss(bayes_predictive(task, seq), seq)
    wrong = predictor_loss(bayes_predictive(InContextMarkov.chain(3, 5.0, 32), seq), seq)
    assert wrong.loss - right.loss > 5 * right.std_error  # the same sequences: the gap is paired


def test_exact_joint_laws_match_sampled_pairs():
    task = InContextMarkov(3, 1.0, tree_parents(10, 3, seed=2))
    seq, kernels = task.sequences_and_kernels(40_000, _gen(3))
    laws = joint_laws(task, kernels, 9)
    assert np.allclose(laws.sum(axis=(2, 3)), 1.0)
    seq = seq.numpy()
    for j in (0, 4, 8):
        pairs = np.eye(3)[seq[:, j]][:, :, None] * np.eye(3)[seq[:, 9]][:, None, :]
        diff = (pairs - laws[:, j]).mean(axis=0)  # per-kernel law against its own sequence
        assert np.abs(diff).max() < 5 * np.sqrt(1 / 9 / len(seq))


@pytest.mark.parametrize("parents, i, top", [(chain_parents(12), 9, 8), (tree_parents(12, 4, seed=0), 10, None)],
                         ids=["chain", "tree"])
def test_the_chi2_information_is_largest_at_the_parent(parents, i, top):
    task = InContextMarkov(3, 1.0, parents)
    info, error = chi2_information(task, i, 2000, seed=0)
    parent = parents[i][0] if top is None else top
    others = np.delete(info, parent)
    assert info[parent] - others.max() > 5 * error.max()


def _every_sequence(k: int, T: int) -> np.ndarray:
    return np.array(list(itertools.product(range(k), repeat=T + 1)))


def test_the_count_estimator_is_the_bayes_predictor_without_pseudo_counts():
    task = InContextMarkov.chain(3, 1e-12, 6)
    seq = _every_sequence(3, 6)
    counts, bayes = count_predictive(task, seq), bayes_predictive(task, seq)
    seen = ~np.isnan(counts[..., 0])
    assert seen.any() and not seen.all()
    assert np.abs(counts - bayes)[seen].max() < 1e-9


@pytest.mark.parametrize("k, T", [(2, 9), (3, 7)])
def test_the_induction_head_writes_the_count_estimator_on_every_sequence(k, T):
    seq = _every_sequence(k, T)
    want = count_predictive(InContextMarkov.chain(k, 1.0, T), seq)
    seen = ~np.isnan(want[..., 0])
    for beta in (10.0, 20.0, 40.0):
        with torch.no_grad():
            got = successor_average(induction_head(k, T, beta), torch.from_numpy(seq[:, :-1])).numpy()
        # softmax leaks weight of order T e^-beta past the matches (measured: 1.2 to 2.3 times it)
        assert np.abs(got - want)[seen].max() <= max(3 * T * np.exp(-beta), 1e-12)


def test_the_induction_head_fails_without_its_first_layer():
    k, T = 3, 7
    seq = torch.from_numpy(_every_sequence(k, T)[:, :-1])
    model = induction_head(k, T, 40.0)
    with torch.no_grad():
        model.blocks[0].attn.proj.weight.zero_()  # no previous token copied: layer 2 matches nothing
        got = successor_average(model, seq).numpy()
    want = count_predictive(InContextMarkov.chain(k, 1.0, T), _every_sequence(k, T))
    seen = ~np.isnan(want[..., 0])
    assert np.abs(got - want)[seen].max() > 0.1
