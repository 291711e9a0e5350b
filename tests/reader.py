"""A reader's parameter values, drawn at random (seeded) from each chapter's declared domains, at unit scale.

Run as a script, it runs a list of drawn settings from the command line, one after the other, in
one process (``python tests/reader.py <chapter> <settings.json> <out_dir>``), so that the tests
can spread the draws over the machine's cores.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sandboxes.chapters import get_chapter
from sandboxes.claims import Claim
from sandboxes.sections import Chapter

from conftest import TINY

# Where a unit-test value would make a random draw needlessly slow, the scale to draw around instead.
DRAW_NEAR: dict[str, dict[str, Any]] = {
    "dilution": {"base": 16, "lstm_hidden": 16, "n_layer": 1},
    "memories": {"mlp_steps": 64, "facts_steps": 16, "mlp_seeds": 1, "facts_seeds": 1, "noisy_steps": 20},  # each
    # capacity search trains tens of models (175 s at unit); one seed of each near the unit scale, and the noisy
    # recall's steps near half the unit scale's
}


def is_trained_row(chapter: str, claim: Claim) -> bool:
    """Whether a small budget may leave ``claim`` undecided (``Section.may_stay_undecided``): it judges trained
    models or a sample rather than exact theory."""
    return get_chapter(chapter).section(claim.section).may_stay_undecided(claim)


def draw_settings(chapter: Chapter, rng: np.random.Generator) -> dict[str, Any]:
    """Each parameter, with probability 1/2, drawn from its domain on the scale of its unit-test value."""
    settings: dict[str, Any] = {}
    for param in chapter.params:
        near = TINY[chapter.name].get(param.name, param.quick)
        drawn = rng.random() < 0.5
        scale = DRAW_NEAR.get(chapter.name, {}).get(param.name, near)
        settings[param.name] = param.domain.draw(rng, scale) if drawn else scale
    return settings


def run_all(chapter: str, settings: list[dict[str, Any]], out_dir: Path) -> list[int]:
    """Run ``chapter`` once per settings from the command line; the exit codes, result files in ``out_dir``."""
    from sandboxes.cli import main

    seeds = str(get_chapter(chapter).min_seeds)
    codes = []
    for i, values in enumerate(settings):
        flags = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
        codes.append(
            main(
                [
                    "run",
                    chapter,
                    *flags,
                    "--seeds",
                    seeds,
                    "--device",
                    "cpu",
                    "--no-progress",
                    "--out",
                    str(out_dir / f"{i}.json"),
                ]
            )
        )
    return codes


if __name__ == "__main__":
    name, path, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    print(json.dumps(run_all(name, json.loads(path.read_text()), out)))
