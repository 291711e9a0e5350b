"""Chapter: what one attention layer can represent (Sanford, Hsu and Telgarsky 2023; Svete and Cotterell 2024).

``measure`` computes each section into its data (a ``TypedDict`` per section, which ``figures`` draws), ``judge``
makes every section's rows from its config and data alone and holds the tolerances. The sections built so far are
constructions checked exactly; none trains yet.
"""

from __future__ import annotations

from typing import Any

from ...profiles import Interval, Param, at_least, each, float_list, in_range, int_list
from ...sections import Chapter, Section
from .judge import match2_rows, ngram_rows
from .measure import match2, ngram

__all__ = ["CHAPTER", "PARAMS"]

MOST_INPUTS = 10**6  # every input of [M]^N is checked: at most this many
MOST_WEIGHTS = 2 * 10**9  # attention weights computed for the random checks: inputs times (N + 1)^2, about a minute
MOST_RUNS = 2 * 10**5  # strings through a transformer: strings x (scales + 1) x (order, shape) pairs, about 0.5 ms each
MOST_HISTORIES = 10**4  # the layer's MLP has a unit per history: (symbols + 1)^(n - 1) at most

PARAMS = (
    Param("seed", int, 0, 0, "seed of the random inputs and of the n-gram models", at_least(0)),
    Param("match_M", int, 6, 7, "M of the exhaustive check: tokens 0..M-1", at_least(2)),
    Param("match_N", int, 6, 7, "N of the exhaustive check: every input of [M]^N", at_least(1)),
    Param(
        "match_random_N", str, "8,32,128", "8,32,128,512", "N of the random checks (M = N^2)", each(in_range(2, 1024))
    ),
    Param("match_random_inputs", int, 500, 2000, "random inputs per size", in_range(1, 100000)),
    Param("precision_N", int, 16, 16, "N of the float32 check", in_range(2, 256)),
    Param(
        "precision_M",
        str,
        "16,256,1024,2048,4096,16384",
        "16,64,256,512,1024,1448,2048,2896,4096,16384",
        "M of the float32 check",
        each(in_range(2, 10**6)),
    ),
    Param("ngram_symbols", int, 3, 3, "symbols of the n-gram models (EOS and BOS besides)", in_range(1, 16)),
    Param("ngram_orders", str, "2,3,4", "2,3,4,5", "orders n of the n-gram models", each(in_range(2, 8))),
    Param("ngram_length", int, 5, 7, "every string up to this length is checked", in_range(0, 64)),
    Param(
        "ngram_scales",
        str,
        "1,2,4,8,16,32",
        "1,2,4,8,16,32",
        "scales beta of the softmax heads",
        each(Interval(0.0, 1e4, open_low=True)),
    ),
)


def check(config: dict[str, Any], n_seeds: int) -> None:
    """Refuse, before any work, sizes whose exhaustive checks would not end in minutes."""
    if config["match_M"] ** config["match_N"] > MOST_INPUTS:
        raise ValueError(
            f"match_M^match_N = {config['match_M']}^{config['match_N']} inputs to check exceeds {MOST_INPUTS}"
        )
    weights = (
        config["match_random_inputs"] * (max(int_list(config["match_random_N"]) + [config["precision_N"]]) + 1) ** 2
    )
    if weights > MOST_WEIGHTS:
        raise ValueError(
            f"match_random_inputs and the largest N give {weights} attention weights, more than {MOST_WEIGHTS}"
        )
    strings = sum(config["ngram_symbols"] ** k for k in range(config["ngram_length"] + 1))
    orders = int_list(config["ngram_orders"])
    runs = strings * (len(float_list(config["ngram_scales"])) + 1) * (2 * len(orders) - orders.count(2))
    if runs > MOST_RUNS:
        raise ValueError(
            f"ngram_symbols, ngram_length, ngram_scales and ngram_orders give {runs} runs of a transformer on a "
            f"string, more than {MOST_RUNS}"
        )
    histories = (config["ngram_symbols"] + 1) ** (max(int_list(config["ngram_orders"])) - 1)
    if histories > MOST_HISTORIES:
        raise ValueError(
            f"ngram_symbols + 1 to the power of the largest order less one is {histories}, more than {MOST_HISTORIES}"
        )


UNIT_SCALE = {
    "match_M": 4,
    "match_N": 4,
    "match_random_N": "8",
    "match_random_inputs": 20,
    "precision_M": "16,4096",
    "ngram_orders": "2,3,4",
    "ngram_length": 3,
    "ngram_scales": "1,4,16",
}
FULL_SHRUNK = {"match_M": 4, "match_N": 4, "match_random_inputs": 10, "ngram_length": 2}

CHAPTER = Chapter(
    "onelayer",
    "What one attention layer can represent",
    PARAMS,
    seeds={"quick": 1, "reference": 1, "full": 1},
    sections=(
        Section("match2", "Match2 in embedding dimension 3", match2, rows=match2_rows, figures=("match2",)),
        Section("ngram", "An n-gram language model in one layer", ngram, rows=ngram_rows, figures=("ngram",)),
    ),
    check=check,
    unit_scale=UNIT_SCALE,
    full_shrunk=FULL_SHRUNK,
)
