"""The next-token loss, the target no loss counts and the attention entropy: shared by data tasks and the trainer."""

from __future__ import annotations

from torch import Tensor
from torch.nn import functional as F

IGNORE_INDEX = -100  # a target that no loss counts (flip-flop positions that are not reads)


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose target is not ``IGNORE_INDEX``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)


def scored_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over the scored targets (not ``IGNORE_INDEX``), and zero with no gradient where a batch
    scores none: for tasks whose scored targets are rare events (where :func:`next_token_loss` would give NaN)."""
    summed = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return summed / (targets != IGNORE_INDEX).sum().clamp_min(1)


def attention_entropy(weights: Tensor) -> Tensor:
    """Entropy of each attention row (nats); masked keys have weight 0 and add nothing."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)
