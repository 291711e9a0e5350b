"""The chapter's in-context chains and its seeded draws, which the measurements make and the judge recomputes."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...data.incontext import InContextMarkov, chain_parents, tree_parents
from ...runtime import member_seed

STAGE_PROBES = 256  # held-out sequences on which each evaluation measures the model's distance to each strategy


def task_of(config: dict[str, Any]) -> InContextMarkov:
    """The chapter's in-context chain: the chain, or the tree drawn with ``seed``."""
    T = config["T"]
    parents = chain_parents(T) if config["graph"] == "chain" else tree_parents(T, config["window"], config["seed"])
    return InContextMarkov(config["k"], config["alpha"], parents)


def generator(config: dict[str, Any], purpose: str) -> torch.Generator:
    """A generator for one purpose, fixed by the chapter's own settings and not by the order of the sections."""
    return torch.Generator().manual_seed(member_seed("induction", purpose, config["seed"]))


def stage_probes(config: dict[str, Any]) -> Tensor:
    """The held-out sequences on which the training section measures each model's distance to each strategy."""
    return task_of(config).sequences(STAGE_PROBES, generator(config, "stages"))
