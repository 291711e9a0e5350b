"""The chapter's in-context chains and its seeded draws, which the measurements make and the judge recomputes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...data.incontext import InContextMarkov, chain_parents, tree_parents
from ...data.trigger import TriggerTask
from ...heldout import TRAINER_EVAL
from ...heldout import generator as held_out_generator
from ...profiles import float_list
from ...runtime import member_seed

STAGE_PROBES = 256  # held-out sequences on which each evaluation measures the model's distance to each strategy
BIGRAM_CONCENTRATION = 0.5  # Dirichlet rows of the global bigram: peaked, as a language's letter bigram is


def task_of(config: dict[str, Any]) -> InContextMarkov:
    """The chapter's in-context chain: the chain, or the tree drawn with ``seed``."""
    T = config["T"]
    parents = chain_parents(T) if config["graph"] == "chain" else tree_parents(T, config["window"], config["seed"])
    return InContextMarkov(config["k"], config["alpha"], parents)


def generator(config: dict[str, Any], purpose: str) -> torch.Generator:
    """A generator for one purpose, fixed by the chapter's own settings and not by the order of the sections."""
    return torch.Generator().manual_seed(member_seed("induction", purpose, config["seed"]))


CURVE_SEQUENCES = 256  # the trainer's held-out set for the GPTs' loss curves (TrainConfig.eval_size)


def stage_probes(config: dict[str, Any]) -> Tensor:
    """The held-out sequences on which the training section measures each model's distance to each strategy."""
    return task_of(config).sequences(STAGE_PROBES, generator(config, "stages"))


def curve_sequences(config: dict[str, Any]) -> Tensor:
    """The held-out sequences ``(CURVE_SEQUENCES, T + 1)`` on which the trainer reads the training section's loss
    curve, drawn as the trainer draws them: the judge scores the strategies on the same ones."""
    task = task_of(config)
    inputs, targets = task.sample_members([task], CURVE_SEQUENCES, [held_out_generator(TRAINER_EVAL)])
    return torch.cat([inputs[0, :, :1], targets[0]], dim=1)


def trigger_task(config: dict[str, Any]) -> TriggerTask:
    """The trigger task of the chapter's settings; its bigram and triggers fixed by ``seed``, or its triggers drawn
    per sequence (``trigger_draw``)."""
    return TriggerTask(
        config["trigger_tokens"],
        config["triggers"],
        config["trigger_T"],
        BIGRAM_CONCENTRATION,
        config["seed"],
        zipf=config["trigger_zipf"],
        choice=config["trigger_choice"],
        per_sequence=config["trigger_draw"] == "per_sequence",
        scored=config["trigger_scored"],
    )


def trigger_held_out(config: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The trigger section's held-out sequences ``(eval_size, trigger_T + 1)`` and each one's triggers: the same for
    the run, which scores its models on them, and for the judge, which scores the guesses that read no order."""
    drawn, triggers, _ = trigger_task(config).draw(config["eval_size"], generator(config, "trigger"))
    return drawn.numpy(), triggers


def width_config(config: dict[str, Any]) -> dict[str, Any]:
    """The trigger task's values read by the width section: those of the trigger section at ``width_T`` tokens."""
    return {**config, "trigger_T": config["width_T"]}


def trigger_widths(config: dict[str, Any]) -> list[int]:
    """The widths the width section trains: each of ``width_ratios`` times ``width_T``."""
    return [round(ratio * config["width_T"]) for ratio in float_list(config["width_ratios"])]
