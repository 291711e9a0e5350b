"""Memory-recall probes: the share of associations a matrix stores, ties counting as not stored."""

import torch

from sandboxes import probes


def test_a_matrix_holding_every_association_recalls_all_and_zero_recalls_none():
    keys, values = torch.eye(4), torch.eye(4)
    assert probes.recall_share(probes.bilinear_scores(keys, torch.eye(4), values), torch.arange(4)) == 1.0
    assert probes.recall_share(probes.bilinear_scores(keys, torch.zeros(4, 4), values), torch.arange(4)) == 0.0


def test_a_permuted_memory_recalls_its_own_targets_only():
    shift = torch.roll(torch.eye(4), 1, dims=0)  # stores i -> i + 1
    scores = probes.bilinear_scores(torch.eye(4), shift.T, torch.eye(4))
    assert probes.recall_share(scores, (torch.arange(4) + 1) % 4) == 1.0
    assert probes.recall_share(scores, torch.arange(4)) == 0.0


def test_causal_rules_out_the_keys_after_the_query():
    scores = probes.causal(torch.ones(3, 3))
    assert torch.isinf(scores[0, 1:]).all() and torch.isfinite(scores[2]).all()
    previous = probes.causal(torch.diag(torch.ones(2), -1))  # each position scores the one before it highest
    assert probes.recall_share(previous[1:], torch.arange(2)) == 1.0
