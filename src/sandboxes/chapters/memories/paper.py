"""What the papers report of the trained memories beside a run's, for the page's comparison tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...theory.memories import growth_exponent, recall_samples
from .judge import (
    fact_exponent,
    facts_per_parameter,
    mlp_constant,
    mlp_exponents,
    plateau_rest,
)

if TYPE_CHECKING:
    from .measure import DistributionalData, FactCapacityData, HallucinationData, MlpCapacityData

AUTHORS_MLP_CONSTANT = 1 / 0.35  # N ln N / (m d) of the guide line in Nichani, Lee and Bietti's Fig. 1 (right), as
# their plotting code draws it (m d = 0.35 N ln N); a guide to the eye, not a fit they report


AUTHORS_FACTS_PER_PARAMETER = 0.15  # the guide line of Nichani, Lee and Bietti's Fig. 4 (left), as their plotting
# code draws it (facts = 0.15 x parameters); a guide to the eye, not a fit they report


def fact_capacity_vs_paper(run: FactCapacityData) -> list[tuple[str, str, str]]:
    """The facts a one-layer transformer stores as the authors' Fig. 4 (left) shows them, beside the run."""
    exponent, _ = fact_exponent(run)
    return [
        (
            "law",
            "facts stored linear in parameters, H = 8, 8 answers per relation, H d_h and m from d / 4 to 4 d, d from "
            "8 to 181 (Fig. 4, left; one seed, up to 2^14 steps of batch 1024, three step sizes)",
            f"S R ~ P^{exponent:.2f}, H = {run['heads']}, {run['per_relation']} answers per relation, d from "
            f"{min(run['dims'])} to {max(run['dims'])} ({run['steps']} steps)",
        ),
        (
            "constant",
            f"guide line S R = {AUTHORS_FACTS_PER_PARAMETER} P (their plotting code)",
            f"median S R / P = {facts_per_parameter(run):.3f}",
        ),
    ]


def mlp_capacity_vs_paper(run: MlpCapacityData) -> list[tuple[str, str, str]]:
    """The trained MLP memory's capacity as the authors' Fig. 1 (right) shows it, beside the run."""
    (a, b), _ = mlp_exponents(run)
    return [
        (
            "law",
            "N ln N proportional to m d, for m / d = 1, 2, 4, 8 and d from 8 to 90 (Fig. 1, right; 5 seeds, 2^15 "
            "full-batch Adam steps)",
            f"N ln N ~ m^{a:.2f} d^{b:.2f} for m / d = {', '.join(map(str, run['ratios']))} and d from "
            f"{min(run['dims'])} to {max(run['dims'])} ({run['steps']} steps)",
        ),
        (
            "constant",
            f"guide line N ln N = {AUTHORS_MLP_CONSTANT:.2f} m d (their plotting code)",
            f"median N ln N / (m d) = {mlp_constant(run):.2f}",
        ),
    ]


def hallucination_vs_paper(run: HallucinationData) -> list[tuple[str, str, str]]:
    """The hallucination stage as the slides and the authors' notebook show it, beside the run."""
    levels, parts = run["levels"], np.asarray(run["parts"])
    steps = np.asarray(run["eval_steps"])
    rests = [plateau_rest(steps, seed[:, 0], levels) for seed in parts]
    return [
        (
            "intermediate stage",
            "predicts with p(a | r), uniform over the relation's answers, ignoring the subject (no number in the "
            "slides)",
            f"rest at H(a | r) = {levels['relation']:.3f}: {min(rests):.2f} to {max(rests):.2f} times the fall to it",
        ),
        (
            "end of training",
            "global convergence to zero loss (gradient flow)",
            f"held-out loss {parts[:, -1, 0].min():.3g} to {parts[:, -1, 0].max():.3g}",
        ),
    ]


def distributional_vs_paper(run: DistributionalData) -> list[tuple[str, str, str]]:
    """Noisy in-context recall as Chen, Bruna and Bietti's code runs it and the talk states it, beside the run."""
    samples = recall_samples(run)
    full, cut = (np.asarray(run["ablations"][name], dtype=float) for name in ("full", "no_mlp_2"))

    def exponent(k: int) -> str:
        if np.isnan(samples[..., k]).any() or len(set(run["tokens"])) < 2:
            return "not measured (a run did not learn it, or one N)"
        return f"N^{growth_exponent(run['tokens'], samples[..., k]):.2f} (scored recalls seen)"

    return [
        (
            "setting",
            "65 characters (Shakespeare's bigram), one trigger (the most frequent), a rare noise token ('!') with "
            "probability 0.5, T = 256; two layers, d = 256, embeddings and output fixed (PyTorch's default "
            "initialisations), SGD (momentum 0.9, step 0.03, weight decay 1e-4), batch 512, 5000 steps; loss on the "
            "trigger's second and later occurrences",
            f"N = {', '.join(map(str, run['tokens']))} (a Zipf-shaped random bigram, its rarest token the noise), "
            f"noise probability {run['noise_p']:g}, the same loss; embeddings N(0, 1/d), AdamW without decay, batch "
            f"{run['batch']}",
        ),
        ("samples for the feed-forward layer's bigram", "O(1) (informal theorem)", exponent(0)),
        ("samples for attention's in-context answer", "O(N) (informal theorem)", exponent(1)),
        (
            "layer 2's MLP zeroed",
            "the prediction moves from the global bigram to the in-context answer (their truncation; Pythia-1B in "
            "the talk)",
            f"p(noise) {full[..., 0].mean():.2f} -> {cut[..., 0].mean():.2f}, p(answer) {full[..., 1].mean():.2f} "
            f"-> {cut[..., 1].mean():.2f} (means over N and seeds)",
        ),
    ]
