"""The book's chapters as runnable experiments, looked up by name."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..claims import Claim
from ..profiles import Param, check_profile, resolve
from ..results import Result, provenance
from ..runtime import device_name, pick_device


@dataclass(frozen=True)
class RunContext:
    """How to run: the profile, the device, the seeds and whether to show progress bars."""

    profile: str
    device: torch.device
    seeds: list[int]
    progress: bool | None = None


@dataclass(frozen=True)
class Chapter:
    """A chapter's experiment: parameters with profile values and a function that runs it."""

    name: str
    title: str
    params: tuple[Param, ...]
    seeds: Mapping[str, int]  # number of seeds per profile
    experiment: Callable[[dict[str, Any], RunContext], Result]

    def run(
        self,
        profile: str = "quick",
        overrides: Mapping[str, Any] | None = None,
        seeds: int | None = None,
        device: str = "auto",
        progress: bool | None = None,
    ) -> Result:
        """Resolve the config, run the experiment and attach provenance to its result."""
        check_profile(profile)
        config = resolve(self.params, profile, overrides or {})
        n_seeds = self.seeds[profile] if seeds is None else seeds
        if n_seeds < 1:
            raise ValueError(f"--seeds must be at least 1, got {n_seeds}")
        context = RunContext(profile, pick_device(device), list(range(n_seeds)), progress)
        start = time.perf_counter()
        result = self.experiment(config, context)
        result.provenance = provenance(
            context.device.type, device_name(context.device), time.perf_counter() - start
        )
        return result


Section = Callable[[], tuple[list[Claim], dict[str, Any]]]


def run_sections(sections: Iterable[tuple[str, Section]], data: dict[str, Any]) -> list[Claim]:
    """Run a chapter's sections in reading order, storing each one's data under its name.

    ``data`` fills up as the sections run, so a later section may read what an earlier one made.
    """
    claims: list[Claim] = []
    for name, section in sections:
        section_claims, data[name] = section()
        claims += section_claims
    return claims


def _registry() -> dict[str, Chapter]:
    from . import dilution, hmm, markov, shortcuts

    return {chapter.name: chapter for chapter in (markov.CHAPTER, shortcuts.CHAPTER, dilution.CHAPTER, hmm.CHAPTER)}


def get_chapter(name: str) -> Chapter:
    chapters = _registry()
    if name not in chapters:
        raise ValueError(f"unknown chapter {name!r}; choose one of {', '.join(chapters)}")
    return chapters[name]


def all_chapters() -> list[Chapter]:
    return list(_registry().values())
