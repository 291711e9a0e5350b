"""Claims: "the theory predicts X, we measured Y, within a stated tolerance", and their verdicts.

Each section of a chapter makes its claims from its data; a page shows them as a table under the section's
figure, and :meth:`Verdict.check` prints a summary that is stable across machines (no measured
numbers) and raises :class:`ClaimFailed` when any claim fails, so a failed claim fails the
notebook, the book build and the tests.

A claim has three verdicts: it holds (``holds`` is ``True``), it fails (``False``), or it is
*undecided at this budget* (``None``): while a run had not settled when its budget ran out, a claim
that something eventually happens (an escape, a convergence) and fails, or a claim that something
never happens and holds. An undecided claim never counts as holding, and never as failing; its
reason says what budget would decide it. A row about every seed is also undecided when it holds for its
seeds but their measured spread leaves even their mean within noise of the bound
(:meth:`Claim.held_to_spread`): more seeds decide it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy.stats import t as student_t

SPREAD_LEVEL = 0.95  # one-sided level of the bounds a row about every seed is held to (the field's usual 95%)


def seed_bounds(values: Sequence[float] | np.ndarray, upper: bool = True) -> tuple[float, float]:
    """One-sided 95% bounds from one value per seed, the worst cell's of a ``cells x seeds`` array (NaN below two
    seeds or with a value that is not finite): for the seeds' mean, mean + t s / sqrt(n), and for a seed drawn again,
    mean + t s sqrt(1 + 1/n) (Student's t with n - 1 degrees of freedom, for seed-to-seed noise that is normal);
    ``upper=False``: the lower bounds, mean - ..."""
    per_cell = np.asarray(values, dtype=float)
    per_cell = per_cell.reshape(-1, per_cell.shape[-1]) if per_cell.ndim else per_cell.reshape(1, 1)
    n = per_cell.shape[-1]
    if n < 2:
        return math.nan, math.nan
    sign, pick = (1.0, np.max) if upper else (-1.0, np.min)
    t_spread = student_t.ppf(SPREAD_LEVEL, n - 1) * per_cell.std(axis=-1, ddof=1)
    means = per_cell.mean(axis=-1)
    return (
        float(pick(means + sign * t_spread / math.sqrt(n))),
        float(pick(means + sign * t_spread * math.sqrt(1 + 1 / n))),
    )


def _relative_slack(bound: float, value: float, upper: bool) -> float | None:
    """How far ``value`` stands inside ``bound`` (below it for an upper bound), over the bound's size (over 1 for a
    bound of 0, whose scale the row does not give); None for a value or bound that is not finite."""
    slack = (bound - value) if upper else (value - bound)
    margin = slack / abs(bound) if bound != 0 else slack
    return float(margin) if math.isfinite(margin) else None


class ClaimFailed(AssertionError):
    """At least one claim of a chapter did not hold."""


def _fmt(value: float | str, digits: int) -> str:
    return value if isinstance(value, str) else f"{value:.{digits}g}"


@dataclass(frozen=True)
class Claim:
    """One predicted-versus-measured comparison and whether it holds."""

    name: str
    predicted: str
    measured: str
    tolerance: str
    reason: str
    holds: bool | None  # None: undecided at this budget
    section: str = ""  # the section that made it; set when the section runs
    # how far the measured value stands inside its bound: the slack over the tolerance (a ``close`` row) or over the
    # bound's size (a bound), held to the seeds' mean's 95% bound too where the row is; negative: on the failing side;
    # None: a row with no numeric bound (labels, counts). Not part of a row's identity: rows compare without it
    margin: float | None = field(default=None, compare=False, repr=False)

    @property
    def mark(self) -> str:
        """The verdict in one word: holds, fails or undecided."""
        return {True: "holds", False: "fails", None: "undecided"}[self.holds]

    def eventually(self, settled: bool, unsettled: str) -> Claim:
        """This claim about eventual behaviour, undecided if it fails while the run had not ``settled`` (one already
        undecided stays as it is, its reason said once).

        ``unsettled`` says what was still moving and what budget would decide the claim.
        """
        return self if self.holds is not False or settled else self.undecided(unsettled)

    def so_far(self, settled: bool, unsettled: str) -> Claim:
        """This claim that something does not happen (a run stays below a bound), undecided if it holds while the
        run had not ``settled``: it then says only "not yet". One that fails has already seen it happen; one already
        undecided stays as it is."""
        return self if self.holds is not True or settled else self.undecided(unsettled)

    def held_to_spread(
        self, bound: float, values: Sequence[float] | np.ndarray, seeds_param: str = "", upper: bool = True
    ) -> Claim:
        """This row about every seed, held to the seeds' measured spread: undecided if it holds for these seeds but
        the one-sided 95% confidence bound of their mean (:func:`seed_bounds` of ``values``, one per seed or
        ``cells x seeds``) lies beyond ``bound`` (above it for an upper bound): the seeds then scatter so widely that
        even their mean does not stand clear of the bound, and more seeds decide it: the run's (``--seeds``), or the
        parameter ``seeds_param`` where the row's seeds are a parameter's count. The tolerance
        column shows that bound and the 95% prediction bound for a seed drawn again, which may lie beyond ``bound``
        while the row holds: how far the verdict carries to a seed not trained."""
        (mean, new_seed), seeds = seed_bounds(values, upper), np.shape(values)[-1] if np.ndim(values) else 1
        if seeds < 2:
            return replace(self, tolerance=f"{self.tolerance}; one seed: no spread")
        if math.isnan(mean):
            unmeasured = replace(self, tolerance=f"{self.tolerance}; no spread: a seed's value is not finite")
            return unmeasured.undecided("a seed's value is not finite") if self.holds else unmeasured
        side = "≤" if upper else "≥"
        spread_margin = _relative_slack(bound, mean, upper)
        margin = min((m for m in (self.margin, spread_margin) if m is not None), default=None)
        measured = replace(
            self,
            margin=margin,
            tolerance=f"{self.tolerance}; 95%: seeds' mean {side} {_fmt(mean, 3)}, a new seed "
            f"{side} {_fmt(new_seed, 3)} (n = {seeds})",
        )
        if self.holds is not True or (mean <= bound if upper else mean >= bound):
            return measured
        more_seeds = f"--set {seeds_param}=..." if seeds_param else "--seeds"
        return measured.undecided(
            f"every seed holds, but the seeds scatter so widely that the 95% bound of their "
            f"mean ({mean:.3g}) lies beyond the bound: more seeds ({more_seeds}) decide it"
        )

    def undecided(self, unsettled: str) -> Claim:
        """This claim undecided at this budget whatever it measured: what it speaks of (a run that solves its task,
        say) was not reached; ``unsettled`` says what was missing and what budget would decide it."""
        return replace(self, holds=None, reason=f"{self.reason}; undecided at this budget: {unsettled}")

    @classmethod
    def close(cls, name: str, predicted: float, measured: float, tol: float, reason: str, digits: int = 4) -> Claim:
        """Holds when ``|measured - predicted| <= tol``."""
        slack = tol - abs(measured - predicted)
        return cls(
            name,
            _fmt(predicted, digits),
            _fmt(measured, digits),
            f"± {tol:.2g}",
            reason,
            bool(abs(measured - predicted) <= tol),
            margin=slack / tol if tol > 0 and math.isfinite(slack) else None,
        )

    @classmethod
    def at_most(cls, name: str, bound: float, measured: float, reason: str, digits: int = 4) -> Claim:
        """Holds when ``measured <= bound``."""
        return cls(
            name,
            f"≤ {_fmt(bound, digits)}",
            _fmt(measured, digits),
            "bound",
            reason,
            bool(measured <= bound),
            margin=_relative_slack(bound, measured, upper=True),
        )

    @classmethod
    def at_least(cls, name: str, bound: float, measured: float, reason: str, digits: int = 4) -> Claim:
        """Holds when ``measured >= bound``."""
        return cls(
            name,
            f"≥ {_fmt(bound, digits)}",
            _fmt(measured, digits),
            "bound",
            reason,
            bool(measured >= bound),
            margin=_relative_slack(bound, measured, upper=False),
        )

    @classmethod
    def exact(cls, name: str, predicted: str, measured: str, reason: str) -> Claim:
        """Holds when the two descriptions agree exactly (signs, labels, counts)."""
        return cls(name, predicted, measured, "exact", reason, predicted == measured)

    def to_dict(self) -> dict:
        return asdict(self)


def _mark(colour: str, path: str) -> str:
    """A 12-pixel inline SVG disc: drawn by any browser, with no font whose glyphs a page might lack."""
    return (
        f'<svg width="12" height="12" viewBox="0 0 12 12" role="img" aria-hidden="true">'
        f'<circle cx="6" cy="6" r="6" fill="{colour}"/><path d="{path}" stroke="#fff" stroke-width="1.6" '
        f'fill="none"/></svg>'
    )


MARKS = {
    "holds": _mark("#2e7d32", "M3 6.2l2 2 4-4.4"),
    "fails": _mark("#c62828", "M3.8 3.8l4.4 4.4M8.2 3.8l-4.4 4.4"),
    "undecided": _mark("#757575", "M3.5 6h5"),
}
VERDICT_WORDS = {"holds": "holds", "fails": "fails", "undecided": "undecided at this budget"}


class Verdict(list):
    """The claims of one run, displayable as a table."""

    @property
    def holds(self) -> bool:
        """Every claim holds (an undecided one does not)."""
        return all(c.holds is True for c in self)

    def failures(self) -> list[Claim]:
        return [c for c in self if c.holds is False]

    def undecided(self) -> list[Claim]:
        return [c for c in self if c.holds is None]

    def tally(self) -> str:
        """``n of m claims hold`` and, where there are any, how many fail and how many are undecided."""
        parts = [f"{sum(c.holds is True for c in self)} of {len(self)} claims hold"]
        parts += [
            f"{len(rows)} {word}" for rows, word in ((self.failures(), "fail"), (self.undecided(), "undecided")) if rows
        ]
        return ", ".join(parts)

    def _repr_html_(self) -> str:
        """A table that reads at a glance: per row its mark, its claim, the predicted and the measured value on one
        line, and under the claim, one click away, the tolerance and why it is that tolerance."""
        pad = 'style="padding: 0.2em 0.6em"'  # the theme sets no padding: numbers in adjacent cells would touch
        head = "".join(f"<th {pad}>{h}</th>" for h in ("verdict", "claim", "predicted", "measured"))
        rows = []
        for c in self:
            why = (
                f"<details><summary>tolerance and why</summary><p>{html.escape(c.tolerance)}</p>"
                f"<p>{html.escape(c.reason)}</p></details>"
            )
            rows.append(
                f'<tr><td class="verdict-{c.mark}" style="white-space: nowrap; padding: 0.2em 0.6em">'
                f"{MARKS[c.mark]} {VERDICT_WORDS[c.mark]}</td><td {pad}>{html.escape(c.name)}{why}</td>"
                f"<td {pad}>{html.escape(c.predicted)}</td><td {pad}>{html.escape(c.measured)}</td></tr>"
            )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"

    def text(self, measured: bool = True) -> str:
        """A plain-text table; ``measured=False`` leaves out the machine-dependent column."""
        lines = []
        for c in self:
            mark = c.mark if c.holds else c.mark.upper()
            middle = (
                f"predicted {c.predicted}, measured {c.measured} ({c.tolerance})"
                if measured
                else f"predicted {c.predicted}"
            )
            lines.append(f"[{mark}] {c.name}: {middle}")
        return "\n".join(lines)

    def check(self) -> None:
        """Print a machine-independent summary; raise :class:`ClaimFailed` if a claim fails (not if undecided)."""
        print(self.text(measured=False))
        failed = self.failures()
        if failed:
            raise ClaimFailed("claims that failed:\n" + Verdict(failed).text())
        print(f"all {len(self)} claims hold" if self.holds else self.tally())
