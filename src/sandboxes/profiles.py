"""Profiles and chapter parameters: every parameter has a quick, a reference and a full value.

``quick`` runs a chapter on a 2-core CPU in about two minutes (what CI and nbval run);
``reference`` is sized by measurement to show the papers' headline results on that CPU within an
hour per section, run once and committed under ``results/``; ``full`` is the papers' scale, meant
for a GPU. A parameter's reference value is its quick value unless the chapter names another
(:func:`with_reference`). Values given on the command line are parsed and checked
here, so a bad value stops the run with a message instead of drawing a wrong figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

PROFILES = ("quick", "reference", "full")


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


class Domain(Protocol):
    """The values a parameter accepts, declared once: checked before any work, shown by ``list``, drawn by tests."""

    def check(self, value: Any) -> None:
        """Raise ``ValueError`` with a one-line message when ``value`` is outside the domain."""

    def describe(self) -> str:
        """The domain in a few words, for ``python -m sandboxes list``."""

    def draw(self, rng: np.random.Generator, near: Any) -> Any:
        """A random value of the domain on the scale of ``near`` (a value in it), as a reader might choose."""


@dataclass(frozen=True)
class Interval:
    """Numbers from ``low`` to ``high`` (either end open or absent); integers when ``integer``."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    integer: bool = False

    def check(self, value: float) -> None:
        below = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        above = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if below or above:
            raise ValueError(f"must be {self.describe()}, got {value}")

    def describe(self) -> str:
        def number(x: float) -> str:
            return f"{x:g}"

        if self.integer and self.low is not None and self.high is not None:
            return f"an integer in {number(self.low)}..{number(self.high)}"
        if self.low is not None and self.high is not None and self.open_low == self.open_high:
            where = "strictly between" if self.open_low else "from"
            return f"a number {where} {number(self.low)} {'and' if self.open_low else 'to'} {number(self.high)}"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.open_low else '>='} {number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.open_high else '<='} {number(self.high)}")
        return ("an integer " if self.integer else "a number ") + " and ".join(parts)

    def draw(self, rng: np.random.Generator, near: float) -> float | int:
        if self.integer:
            low = int(self.low if self.low is not None else near - 4)
            high = int(self.high if self.high is not None else max(2 * near, low + 4))
            return int(rng.integers(low, high + 1))
        if self.low is not None and self.high is not None:
            low = float(np.nextafter(self.low, self.high)) if self.open_low else self.low
            return float(rng.uniform(low, self.high))  # uniform never returns its upper end
        return float(near * np.exp(rng.uniform(-1.0, 1.0)))  # within a factor e of a value a chapter uses


@dataclass(frozen=True)
class Flag:
    """True or false."""

    def check(self, value: bool) -> None:
        """Any boolean is accepted."""

    def describe(self) -> str:
        return "true or false"

    def draw(self, rng: np.random.Generator, near: bool) -> bool:
        return bool(rng.integers(2))


@dataclass(frozen=True)
class ListOf:
    """A comma-separated list, each entry in ``item``, with at least ``min_length`` entries; ``distinct``: no entry
    twice (a list whose entries name runs or rows)."""

    item: Interval
    min_length: int = 1
    distinct: bool = False

    def entries(self, text: str) -> list:
        """The entries of ``text``, converted; a clear error for a bad one."""
        return _split(text, int if self.item.integer else float, "integers" if self.item.integer else "numbers")

    def check(self, text: str) -> None:
        values = self.entries(text)
        if len(values) < self.min_length:
            raise ValueError(f"give at least {self.min_length} comma-separated values, got {text!r}")
        for value in values:
            self.item.check(value)
        if self.distinct and len(set(values)) < len(values):
            raise ValueError(f"repeats a value: {text}")

    def describe(self) -> str:
        once = ", none twice" if self.distinct else ""
        return f"{self.min_length} or more comma-separated values, each {self.item.describe()}{once}"

    def draw(self, rng: np.random.Generator, near: str) -> str:
        scale = self.entries(near)
        values = sorted(
            {
                self.item.draw(rng, scale[int(rng.integers(len(scale)))])
                for _ in range(self.min_length + int(rng.integers(3)))
            }
        )
        while len(values) < self.min_length:  # a repeated draw: widen with new values
            values = sorted(set(values) | {self.item.draw(rng, scale[0])})
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


@dataclass(frozen=True)
class Choice:
    """One of a few named options, each with a few words that say what it means."""

    options: Mapping[str, str]  # name -> meaning

    def check(self, value: str) -> None:
        if value not in self.options:
            raise ValueError(f"must be one of {', '.join(self.options)}, got {value!r}")

    def describe(self) -> str:
        return ", ".join(f"{name} ({meaning})" for name, meaning in self.options.items())

    def draw(self, rng: np.random.Generator, near: str) -> str:
        return list(self.options)[int(rng.integers(len(self.options)))]


@dataclass(frozen=True)
class Custom:
    """A domain with its own check, words and draw (automaton names, HMM sizes)."""

    check_value: Callable[[Any], None]
    words: str
    draw_value: Callable[[np.random.Generator, Any], Any]

    def check(self, value: Any) -> None:
        self.check_value(value)

    def describe(self) -> str:
        return self.words

    def draw(self, rng: np.random.Generator, near: Any) -> Any:
        return self.draw_value(rng, near)


@dataclass(frozen=True)
class Param:
    """A chapter parameter: its type, its value in each profile, its help and its domain."""

    name: str
    kind: type
    quick: Any
    full: Any
    help: str
    domain: Domain
    reference: Any = None  # None: the quick value

    def default(self, profile: str) -> Any:
        if check_profile(profile) == "reference":
            return self.quick if self.reference is None else self.reference
        return self.quick if profile == "quick" else self.full

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
            self.domain.check(value)
        except ValueError as err:
            raise ValueError(f"bad value for {self.name}: {err}") from None
        return value


in_open_unit_interval = Interval(0.0, 1.0, open_low=True, open_high=True)
probability = Interval(0.0, 1.0)
positive = Interval(0.0, open_low=True)
non_negative = Interval(0.0)
FLAG = Flag()


def at_least(bound: int) -> Interval:
    """Integers of at least ``bound``."""
    return Interval(bound, integer=True)


def in_range(low: int, high: int) -> Interval:
    """Integers from ``low`` to ``high``."""
    return Interval(low, high, integer=True)


def each(item: Interval, min_length: int = 1, distinct: bool = False) -> ListOf:
    """A comma-separated list whose entries lie in ``item`` (each once where ``distinct``)."""
    return ListOf(item, min_length, distinct)


positive_ints = ListOf(at_least(1))


def _split(text: str, convert: Callable[[str], float], kind: str) -> list:
    """The entries of a comma-separated list parameter, converted; a clear error for a bad entry."""
    try:
        return [convert(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated {kind}, got {text!r}") from None


def float_list(text: str) -> list[float]:
    """Parse a comma-separated list parameter such as ``"0.01,0.1,1"``."""
    return ListOf(Interval()).entries(text)


def int_list(text: str) -> list[int]:
    """Parse a comma-separated list of integers such as ``"1,2,4"``."""
    return positive_ints.entries(text)


def with_reference(params: tuple[Param, ...], values: Mapping[str, Any]) -> tuple[Param, ...]:
    """``params`` with the reference values named in ``values`` (each checked against its domain)."""
    known = {p.name for p in params}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"reference value for unknown parameter {unknown[0]!r}")
    return tuple(replace(p, reference=p.parse(values[p.name])) if p.name in values else p for p in params)


def resolve(params: tuple[Param, ...], profile: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's values with ``overrides`` applied; an unknown key is an error."""
    known = {p.name: p for p in params}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r}; known: {', '.join(known)}")
    config = {p.name: p.default(profile) for p in params}
    config.update({k: known[k].parse(v) for k, v in overrides.items()})
    return config
