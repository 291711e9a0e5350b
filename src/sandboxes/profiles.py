"""Profiles and chapter parameters: every parameter has a quick (CPU) and a full (GPU) value.

``quick`` runs a chapter on a 2-core CPU in about two minutes (what CI and nbval run); ``full``
is the seeds' scale, meant for a GPU. Values given on the command line are parsed and checked
here, so a bad value stops the run with a message instead of drawing a wrong figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PROFILES = ("quick", "full")


def check_profile(name: str) -> str:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return name


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class Param:
    """A chapter parameter: its type, its value in each profile, and an optional check."""

    name: str
    kind: type
    quick: Any
    full: Any
    help: str
    check: Callable[[Any], None] | None = None  # raises ValueError with a message

    def default(self, profile: str) -> Any:
        return self.quick if check_profile(profile) == "quick" else self.full

    def parse(self, raw: Any) -> Any:
        """Turn a command-line string (or a Python value) into a checked value of ``kind``."""
        try:
            if isinstance(raw, str):
                value = _parse_bool(raw) if self.kind is bool else self.kind(raw)
            elif self.kind is float and isinstance(raw, int) and not isinstance(raw, bool):
                value = float(raw)
            elif isinstance(raw, self.kind):
                value = raw
            else:
                raise ValueError(f"expected {self.kind.__name__}, got {raw!r}")
        except ValueError as err:
            raise ValueError(f"bad value for {self.name}: {err}") from None
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as err:
                raise ValueError(f"bad value for {self.name}: {err}") from None
        return value


def in_open_unit_interval(value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"must lie strictly between 0 and 1, got {value}")


def positive(value: float) -> None:
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")


def float_list(text: str) -> list[float]:
    """Parse a comma-separated list parameter such as ``"0.01,0.1,1"``."""
    values = _split(text, float, "numbers")
    if not values:
        raise ValueError("expected at least one number")
    return values


def each(check: Callable[[float], None]) -> Callable[[str], None]:
    """Apply a single-value check to every entry of a comma-separated list parameter."""
    def check_all(text: str) -> None:
        for value in float_list(text):
            check(value)
    return check_all


def probability(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must lie in [0, 1], got {value}")


def non_negative(value: float) -> None:
    if value < 0:
        raise ValueError(f"must be at least 0, got {value}")


def _split(text: str, convert: Callable[[str], float], kind: str) -> list:
    """The entries of a comma-separated list parameter, converted; a clear error for a bad entry."""
    try:
        return [convert(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated {kind}, got {text!r}") from None


def int_list(text: str) -> list[int]:
    """Parse a comma-separated list of positive integers such as ``"1,2,4"``."""
    values = _split(text, int, "integers")
    if not values or min(values) < 1:
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def at_least(bound: int) -> Callable[[int], None]:
    """A check that an integer parameter is at least ``bound``."""
    def check(value: int) -> None:
        if value < bound:
            raise ValueError(f"must be at least {bound}, got {value}")
    return check


def in_range(low: int, high: int) -> Callable[[int], None]:
    """A check that an integer parameter lies in ``low..high``."""
    def check(value: int) -> None:
        if not low <= value <= high:
            raise ValueError(f"must lie in {low}..{high}, got {value}")
    return check


def resolve(params: tuple[Param, ...], profile: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's values with ``overrides`` applied; an unknown key is an error."""
    known = {p.name: p for p in params}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r}; known: {', '.join(known)}")
    config = {p.name: p.default(profile) for p in params}
    config.update({k: known[k].parse(v) for k, v in overrides.items()})
    return config
