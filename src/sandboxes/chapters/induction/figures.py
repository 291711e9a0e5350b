"""Figures of the induction-heads chapter, each drawn from one section's data (fresh or loaded from JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from ...plotting import COLORS, curves_with_band, reference_line
from ...theory.induction import (
    FORMED,
    PARENT_MASS,
    formed_apart,
    formed_together,
    judged_positions,
    previous_share,
    window_weights,
)

if TYPE_CHECKING:
    from .measure import (
        ConstructionData,
        CorollaryData,
        GradientData,
        GradientGraphs,
        HeldOut,
        HigherOrderData,
        LevelsData,
        MemoriesData,
        MultiHeadOrderData,
        OrderTrainingData,
        ParentHeadsData,
        SecondStage,
        SeparateData,
        StagedData,
        StationaryData,
        SupportData,
        ThreeStepsData,
        TrainingData,
        TriggerData,
        TriggerWidthData,
        TwoLayerOrderData,
    )

LEVEL_NAMES = {"uniform": "uniform (ln k)", "unigram": "in-context unigram", "bayes": "Bayes (in-context bigram)"}


def _draw_position_map(
    ax: plt.Axes,
    table: np.ndarray,
    parents: list[int],
    title: str,
    cmap: str,
    mark: str,
    vmin: float | None,
    vmax: float | None,
) -> AxesImage:
    """Draw a position-by-position table (rows: the later position i, columns: j), each position's parent circled."""
    image = ax.imshow(table, cmap=cmap, vmin=vmin, vmax=vmax)
    rows = [i for i in range(1, len(table)) if parents[i] >= 0]
    ax.plot(
        [parents[i] for i in rows],
        rows,
        "o",
        markerfacecolor="none",
        markeredgecolor=mark,
        markersize=5,
        label="the parent",
    )
    ax.set(xlabel="earlier position j", ylabel="position i", title=title)
    ax.grid(False)
    ax.legend(loc="lower left", fontsize=8)
    return image


def _position_map(
    table: np.ndarray,
    parents: list[int],
    title: str,
    cmap: str,
    label: str,
    mark: str,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Figure:
    """One position-by-position table with its colour bar."""
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    fig.colorbar(_draw_position_map(ax, table, parents, title, cmap, mark, vmin, vmax), ax=ax, shrink=0.8, label=label)
    return fig


def information(data: LevelsData) -> Figure:
    """The chi-square information between each position and every earlier one, the parents circled."""
    return _position_map(
        np.asarray(data["information"], dtype=float),
        data["parents"],
        "chi-square information under the prior",
        "viridis",
        "E I_chi2(s_i; s_j)",
        "white",
    )


def gradient(data: GradientGraphs) -> Figure:
    """Per graph (a row of panels): minus the first gradient on layer 1's positional scores where the first stage
    starts, each row scaled by its largest entry (early rows average fewer positions and move more), the parents
    circled; and a few rows against the distance back from t: autograd at a tiny scale of layer 2, the derived
    first-order gradient, and its long-sequence limit, each over the derived row's largest entry."""
    graphs = data["graphs"]
    fig, axes = plt.subplots(len(graphs), 2, figsize=(10.5, 4.0 * len(graphs)), squeeze=False)
    for (graph, run), (left, right) in zip(graphs.items(), axes):
        _gradient_panels(fig, left, right, run, "the random graph" if graph == "random" else f"the {graph}")
    fig.tight_layout()
    return fig


def _gradient_panels(fig: Figure, left: plt.Axes, right: plt.Axes, data: GradientData, graph: str) -> None:
    """One graph's two panels of :func:`gradient`."""
    table = -np.asarray(data["gradient"], dtype=float)
    table[np.triu_indices_from(table)] = np.nan  # j >= i: masked, or the position itself
    table /= np.nanmax(np.abs(table), axis=1, keepdims=True, initial=0.0, where=~np.isnan(table))
    image = _draw_position_map(
        left, table, data["parents"], f"the first gradient on layer 1's scores, {graph}", "coolwarm", "black", -1.0, 1.0
    )
    fig.colorbar(image, ax=left, shrink=0.8, label="-dL/dA[i, j] / its row's largest")
    small, first = np.asarray(data["small_scale"]), np.asarray(data["first_order"])
    for row, (t, limit) in enumerate(zip(data["overlap_rows"], data["overlap"])):
        scale = np.abs(first[t, : t + 1]).max()
        back = np.arange(t + 1)  # distance back from t: j = t - back
        color = plt.get_cmap("viridis")(row / max(1, len(data["overlap_rows"]) - 1))
        offset = 2.2 * row
        right.plot(back, -small[t, t::-1] / scale - offset, "-", color=color, linewidth=1, label=f"t = {t}")
        right.plot(back, -first[t, t::-1] / scale - offset, "o", color=color, markersize=2.5, fillstyle="none")
        right.plot(back, -np.asarray(limit)[::-1] / scale - offset, "--", color=color, linewidth=0.8)
        parent = data["parents"][t]
        if parent >= 0:
            right.plot(
                [t - parent],
                [-first[t, parent] / scale - offset],
                "o",
                color=COLORS["tied"],
                markersize=6,
                fillstyle="none",
            )
    right.set(
        xlabel="distance back from t (j = t - distance)",
        ylabel="-dL/dA[t, j], rows offset",
        xlim=(-0.5, max([16] + [t - data["parents"][t] for t in data["overlap_rows"]]) + 0.5),
        title=f"{graph}; lines: autograd; rings: derived; dashes: long-T limit",
    )
    right.set_yticks([])
    right.legend(loc="lower right", fontsize=7)


def stationary(data: StationaryData) -> Figure:
    """The squared gradient on layer 2's matrix where layer 2 is uniform, against the length, in both
    configurations of layer 1, with three standard errors (log-log)."""
    fig, ax = plt.subplots()
    names = {
        "uniform": "layer 1 uniform (the unigram point)",
        "previous": "layer 1 on the token before (same predictor)",
    }
    for (name, label), color in zip(names.items(), (COLORS["theory"], COLORS["tied"])):
        estimate, error = np.asarray(data["squared_norm"][name], dtype=float).T
        ax.errorbar(data["lengths"], estimate, yerr=3 * error, marker="o", color=color, label=label, capsize=3)
    ax.set(xscale="log", yscale="log", xlabel="length T", ylabel="squared gradient norm on layer 2's matrix")
    ax.set_xticks(data["lengths"], [str(t) for t in data["lengths"]])
    ax.legend(fontsize=8)
    return fig


def construction(data: ConstructionData) -> Figure:
    """The construction's two attention patterns on one sequence: the token before, then the matching tokens."""
    return _attention_panels(data, ("layer 1: the token before", "layer 2: earlier matches"))


def higher_order(data: HigherOrderData) -> Figure:
    """The order-m construction's three attention patterns on one sequence: the last m tokens, weighted; the
    position before; the positions whose m tokens before match the last m."""
    m = data["order"]
    return _attention_panels(
        data,
        (f"layer 1: the last {m} tokens", "layer 2: the position before", f"layer 3: earlier matches of {m} tokens"),
    )


def two_layer_order(data: TwoLayerOrderData) -> Figure:
    """The two-layer order-m construction's attention patterns on one sequence: the last m + 1 tokens, weighted; the
    positions whose m tokens before match the last m."""
    m = data["order"]
    return _attention_panels(
        data, (f"layer 1: the last {m + 1} tokens, weighted", f"layer 2: earlier matches of {m} tokens")
    )


def multi_head_order(data: MultiHeadOrderData) -> Figure:
    """The multi-head order-m construction's attention patterns on one sequence: each head of layer 1 on its own
    parent; layer 2 on the positions whose m tokens before match the last m."""
    m = data["order"]
    titles = [f"layer 1, head {h + 1}: the token {h + 1} back" for h in range(m)]
    return _attention_panels(
        {**data, "attention": [*data["heads"], data["attention"][1]]},
        (*titles, f"layer 2: earlier matches of {m} tokens"),
    )


def _attention_panels(data: ConstructionData | HigherOrderData | TwoLayerOrderData, titles: tuple[str, ...]) -> Figure:
    """One panel per layer of a construction's attention on its example sequence, tokens on the axes."""
    fig, axes = plt.subplots(1, len(titles), figsize=(4 * len(titles), 3.6))
    tokens = [str(s) for s in data["example"]]
    for ax, table, title in zip(axes, data["attention"], titles):
        ax.imshow(np.asarray(table), cmap="Greys", vmin=0, vmax=1)
        ax.set(
            title=title,
            xlabel="key (token)",
            ylabel="query (token)",
            xticks=range(len(tokens)),
            yticks=range(len(tokens)),
            xticklabels=tokens,
            yticklabels=tokens,
        )
        ax.grid(False)
    fig.tight_layout()
    return fig


def _curves_and_finals(
    ax: plt.Axes, steps: np.ndarray, curves: dict[str, list], finals: dict[str, list[float]], kinds: dict[str, tuple]
) -> None:
    """Each kind's held-out curves (mean and band over seeds) and, as dots at the last step, its final losses on the
    held-out set the levels are computed on; ``kinds`` maps a kind to its colour and label."""
    for kind, (color, label) in kinds.items():
        curves_with_band(ax, steps, np.asarray(curves[kind]), color, label)
        ax.plot(np.full(len(finals[kind]), steps[-1]), finals[kind], "o", color=color, markersize=4)


def training(data: TrainingData) -> Figure:
    """Held-out loss of one- and two-layer models against the three levels; the dots at the end are the final
    losses on the held-out set the levels are computed on."""
    fig, ax = plt.subplots()
    kinds = {"one_layer": (COLORS["tied"], "one layer"), "two_layers": (COLORS["untied"], "two layers")}
    _curves_and_finals(ax, np.asarray(data["eval_steps"]), data["eval_loss"], data["in_distribution"]["loss"], kinds)
    for name, value in data["in_distribution"]["levels"].items():
        reference_line(ax, value, LEVEL_NAMES[name], ":" if name == "unigram" else "--")
    ax.set(xlabel="step", ylabel="held-out loss (nats per token)")
    ax.legend(loc="center right", fontsize=8)
    return fig


STRATEGY_COLORS = {"uniform": COLORS["theory"], "unigram": COLORS["full"], "bayes": COLORS["depth2"]}


def stages(data: TrainingData) -> Figure:
    """Edelman et al.'s stages: each model's distance to each strategy over training (KL from the strategy's
    prediction to the model's), two layers beside one; each panel's first seed's nearest strategy shaded."""
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.6), sharey=True)
    steps = np.asarray(data["eval_steps"])
    for ax, (kind, title) in zip(axes, (("two_layers", "two layers"), ("one_layer", "one layer"))):
        distances = np.asarray(data["strategy_distance"][kind], dtype=float)  # seed x evaluation x strategy
        for i, name in enumerate(data["strategies"]):
            curves_with_band(ax, steps, distances[..., i], STRATEGY_COLORS[name], LEVEL_NAMES[name])
        nearest = distances[0].argmin(axis=-1)
        edges = np.concatenate([[steps[0]], (steps[1:] + steps[:-1]) / 2, [steps[-1]]])
        for e, i in enumerate(nearest):
            ax.axvspan(edges[e], edges[e + 1], color=STRATEGY_COLORS[data["strategies"][i]], alpha=0.08, linewidth=0)
        ax.set(xlabel="step", title=title)
    axes[0].set(ylabel="KL(strategy || model), nats", ylim=(0, None))
    axes[1].legend(loc="upper right", fontsize=8, title="strategy", title_fontsize=8)
    return fig


ORDER_LEVEL_NAMES = {
    "uniform": "uniform (ln k)",
    "unigram": "in-context unigram",
    "lag 1": "first order (lag 1)",
    "first_order": "first order (lag 1)",  # the name in runs made before the lesser estimators were all computed
    "bayes": "Bayes (order m)",
}
ORDER_KINDS_DRAWN = {
    "three_layers": (COLORS["depth2"], "three layers, one head"),  # the colour the book gives its deeper model
    "two_layers": (COLORS["untied"], "two layers, one head"),
}


def order_training(data: OrderTrainingData) -> Figure:
    """Held-out loss of three and two layers of one head on a chain of order m, against the first-order level, the
    best lesser estimator's and the order-m level; the dots at the end are the final losses on the held-out set the
    levels are computed on."""
    fig, ax = plt.subplots()
    if not data["loss"]:
        ax.text(0.5, 0.5, "order 1: no lesser estimator to beat, nothing trained", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    _curves_and_finals(ax, np.asarray(data["eval_steps"]), data["eval_loss"], data["loss"], ORDER_KINDS_DRAWN)
    best = data.get("lesser", "")
    for name, value in data["levels"].items():
        if name == best:
            reference_line(ax, value, f"best lesser: {name}", ":")
        elif name in ORDER_LEVEL_NAMES:
            reference_line(ax, value, ORDER_LEVEL_NAMES[name], "--" if name == "bayes" else ":")
    ax.set(xlabel="step", ylabel="held-out loss (nats per token)", title=f"a chain of order m = {data['order']}")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def order_attention(data: OrderTrainingData) -> Figure:
    """Layer 1 of the trained models by how far back it looks, beside layer 1 of the constructions of the same
    depth: the three-layer head's weights over the last m tokens, the two-layer head's over the last m + 1."""
    lags = data["order"] + 2
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    if not data["loss"]:
        for ax in axes:
            ax.set_axis_off()
        axes[0].text(0.5, 0.5, "order 1: nothing trained", ha="center", transform=axes[0].transAxes)
        return fig
    built = {
        "three_layers": window_weights(data["order"]),
        "two_layers": window_weights(data["order"] + 1),
    }
    for ax, (kind, (color, label)) in zip(axes, ORDER_KINDS_DRAWN.items()):
        seeds = np.asarray(data.get("lag_weight", {}).get(kind, []), dtype=float).reshape(-1, lags)
        x = np.arange(lags)
        if len(seeds):
            ax.bar(x, seeds.mean(axis=0), color=color, alpha=0.6, label=f"trained ({len(seeds)} seeds, mean)")
            for row in seeds:
                ax.plot(x, row, "o", color=color, markersize=3)
        ax.plot(np.arange(len(built[kind])), built[kind], "k_", markersize=18, mew=2, label="the construction")
        ax.set(xlabel="how far back (tokens)", title=label, xticks=x)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("layer 1's mean weight")
    fig.tight_layout()
    return fig


def parent_heads(data: ParentHeadsData) -> Figure:
    """Each head of layer 1 by how far back it looks, trained and untrained: in every seed the heads are ordered by
    the lag of their largest trained weight, so that a panel holds the seeds' heads that look alike; the parents
    (1 to m back) are shaded."""
    trained = np.asarray(data["lag_weight"], dtype=float)  # seeds x heads x window
    start = np.asarray(data["lag_weight_start"], dtype=float)
    order = np.argsort(trained.argmax(axis=-1), axis=-1, kind="stable")
    trained, start = (np.take_along_axis(w, order[..., None], axis=1) for w in (trained, start))
    heads, window = trained.shape[1:]
    fig, axes = plt.subplots(1, heads, figsize=(3.4 * heads, 3.2), sharey=True, squeeze=False)
    x = np.arange(window)
    for head, ax in enumerate(axes[0]):
        ax.axvspan(0.5, data["order"] + 0.5, color=COLORS["theory"], alpha=0.08, label="the parents")
        ax.bar(x, trained[:, head].mean(axis=0), color=COLORS["untied"], alpha=0.6, label="trained, mean of seeds")
        for seed in trained[:, head]:
            ax.plot(x, seed, "o", color=COLORS["untied"], markersize=3)
        for seed in start[:, head]:
            ax.plot(x, seed, "_", color=COLORS["theory"], markersize=10)
        ax.plot([], [], "_", color=COLORS["theory"], markersize=10, label="untrained")
        ax.set(xlabel="how far back (tokens)", title=f"head {head + 1}", xticks=x, ylim=(0, 1.02))
    axes[0][0].set_ylabel("layer 1's weight")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def attention(data: TrainingData) -> Figure:
    """Layer 1's attention in the first two-layer model, one panel per head, parents marked."""
    tables = np.asarray(data["attention"], dtype=float)
    fig, axes = plt.subplots(1, len(tables), figsize=(4.6 * len(tables), 4.0), squeeze=False)
    for head, (ax, table) in enumerate(zip(axes[0], tables)):
        image = _draw_position_map(
            ax, table, data["parents"], f"trained layer 1, head {head + 1}", "Greys", COLORS["tied"], 0.0, 1.0
        )
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="attention weight, mean over held-out sequences")
    return fig


def _final_losses(parts: list[tuple[HeldOut, str]], names: dict[str, str]) -> Figure:
    """Each model's final loss on held-out sets, one panel per set, beside the estimators' levels on the same set."""
    fig, axes = plt.subplots(1, len(parts), figsize=(5.6 * len(parts), 3.4), squeeze=False)
    for ax, (part, title) in zip(axes[0], parts):
        for name, value in part["levels"].items():
            reference_line(ax, value, names[name], {"unigram": ":", "prior_bayes": "-."}.get(name, "--"))
        kinds = [kind for kind in ("one_layer", "two_layers") if kind in part["loss"]]
        for x, kind in enumerate(kinds):
            losses = part["loss"][kind]
            ax.plot(
                np.full(len(losses), x) + np.linspace(-0.1, 0.1, len(losses)),
                losses,
                "o",
                color=COLORS["tied" if kind == "one_layer" else "untied"],
            )
        ax.set(
            xticks=range(len(kinds)),
            xticklabels=[kind.replace("_", " ") for kind in kinds],
            xlim=(-0.5, len(kinds) - 0.5),
            title=title,
            ylabel="final loss (nats per token)",
        )
    fig.tight_layout()
    return fig


def out_of_distribution(data: TrainingData) -> Figure:
    """Each model's final loss in and out of distribution, beside the estimators' levels on the same sequences."""
    return _final_losses(
        [
            (data["in_distribution"], "kernels from the prior"),
            (data["out_of_distribution"], "kernels outside the prior"),
        ],
        LEVEL_NAMES,
    )


def support(data: SupportData) -> Figure:
    """Two layers trained on noisy permutations: final loss on them and on Dirichlet kernels outside their support,
    beside the unigram and count estimators on the same sequences."""
    names = {
        **LEVEL_NAMES,
        "bayes": "count estimator (smoothed by alpha)",
        "prior_bayes": "Bayes for noisy permutations",
    }
    return _final_losses(
        [
            (data["inside"], "noisy permutations (training)"),
            (data["outside"], "Dirichlet kernels (outside the support)"),
        ],
        names,
    )


def trigger(data: TriggerData) -> Figure:
    """Accuracy on a trigger's output at its first occurrence and where it came before, per seed, one and two
    layers, against chance and the paper's reported accuracies."""
    fig, ax = plt.subplots()
    for x, name in enumerate(("first", "recall")):
        for offset, (kind, color, label) in zip(
            (-0.12, 0.12), (("one_layer", COLORS["tied"], "one layer"), ("two_layers", COLORS["untied"], "two layers"))
        ):
            values = data["accuracy"][name][kind]
            ax.plot(np.full(len(values), x + offset), values, "o", color=color, label=label if x == 0 else None)
    reference_line(ax, data["chance"], "chance (ignores the context)", ":")
    reference_line(ax, 1.0, "an induction head", "--")
    ax.set(
        xticks=(0, 1),
        xticklabels=("first occurrence", "trigger seen before"),
        xlim=(-0.5, 1.5),
        ylim=(0, 1.05),
        ylabel="accuracy on the trigger's output (held-out)",
    )
    ax.legend(loc="center left", fontsize=8)
    return fig


def _memory_curves(data: TriggerData | MemoriesData) -> Figure:
    """Each memory-recall probe over training: median over seeds, and each seed thin."""
    fig, ax = plt.subplots()
    steps = np.asarray(data["eval_steps"])
    probed = np.asarray(data["memories"], dtype=float)
    for index, (name, color) in enumerate(zip(data["memory_names"], (COLORS["untied"], COLORS["tied"], "black"))):
        curves_with_band(ax, steps, probed[:, :, index], color, name)
    ax.set(xlabel="step", ylabel="recall probe R (share of associations recalled)", ylim=(0, 1.05))
    ax.legend(loc="lower right", fontsize=8)
    return fig


def memories(data: TriggerData) -> Figure:
    """Each memory-recall probe of the two-layer GPTs on the trigger task over training."""
    return _memory_curves(data)


def trigger_width(data: TriggerWidthData) -> Figure:
    """Left: layer 1's positional probe over training at each width (median over seeds, each seed thin). Right: per
    width, every seed's probe at the end and layer 1's weight on the token before, after a trigger and elsewhere."""
    fig, (curves, ends) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"wspace": 0.3})
    previous = data["memory_names"].index("W_KQ of layer 1")
    steps = np.asarray(data["eval_steps"])
    ratios = np.asarray(data["widths"], dtype=float) / data["T"]
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(ratios)))
    for index, (width, color) in enumerate(zip(data["widths"], colors)):
        probe = np.asarray(data["memories"][index], dtype=float)[:, :, previous]
        curves.plot(steps, probe.T, color=color, linewidth=0.6, alpha=0.5)
        curves.plot(steps, np.median(probe, axis=0), color=color, linewidth=2, label=f"width {width}")
        ends.scatter(np.full(len(probe), ratios[index]), probe[:, -1], color="black", s=14)
        for part, marker, shade in (("after_trigger", "^", COLORS["tied"]), ("elsewhere", "v", COLORS["untied"])):
            weights = data["previous_weight"][part][index]
            ends.scatter(np.full(len(weights), ratios[index]), weights, color=shade, marker=marker, s=14)
    curves.axhline(FORMED, color=COLORS["theory"], linestyle="--", linewidth=1, label="half the positions")
    curves.set(xlabel="step", ylabel="positional probe of layer 1's W_KQ", ylim=(0, 1.05), title=f"T = {data['T']}")
    curves.legend(fontsize=8, loc="upper left")
    ends.scatter([], [], color="black", s=14, label="positional probe at the end")
    ends.scatter([], [], color=COLORS["tied"], marker="^", s=14, label="weight on the token before, after a trigger")
    ends.scatter([], [], color=COLORS["untied"], marker="v", s=14, label="weight on the token before, elsewhere")
    ends.axhline(FORMED, color=COLORS["theory"], linestyle="--", linewidth=1)
    ends.set(xscale="log", xlabel="width / T", ylabel="share", ylim=(0, 1.05), xticks=ratios)
    ends.set_xticklabels([f"{ratio:g}" for ratio in ratios])
    ends.minorticks_off()
    ends.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def simplified_memories(data: MemoriesData) -> Figure:
    """Each memory-recall probe of Bietti et al.'s simplified model over training, the row's level dashed."""
    fig = _memory_curves(data)
    reference_line(fig.axes[0], FORMED, "formed (the row's level)", "--")
    fig.axes[0].legend(loc="lower right", fontsize=8)
    return fig


def separate(data: SeparateData) -> Figure:
    """Left: each memory's probe trained together and, dotted, each memory trained alone up to the update it formed
    at, its stage starting where the one before formed (medians over seeds). Right: per seed, the updates until all
    three had formed each way (hatched: a stage ran out first, a lower bound)."""
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2], "wspace": 0.3})
    colors = (COLORS["untied"], COLORS["tied"], "black")
    stage_steps = np.asarray(data["stage_steps"], dtype=float) + 1
    budget = int(stage_steps[-1])
    needed = np.where(np.asarray(data["stage_updates"]) < 0, budget, np.asarray(data["stage_updates"]))
    offsets = np.concatenate([[0.0], np.cumsum(np.median(needed, axis=0))])
    for index, (name, color) in enumerate(zip(data["memory_names"], colors)):
        joint = np.median(np.asarray(data["joint"], dtype=float)[:, :, index], axis=0)
        curves.plot(np.asarray(data["joint_steps"]) + 1, joint, color=color, label=f"{name}, together")
        own = np.median(np.asarray(data["stages"][index], dtype=float)[:, :, index], axis=0)
        charged = stage_steps <= offsets[index + 1] - offsets[index]  # up to the median update it formed at
        curves.plot(offsets[index] + stage_steps[charged], own[charged], color=color, linestyle=":", linewidth=2)
    curves.plot([], [], color="grey", linestyle=":", label="alone, after the one before formed")
    reference_line(curves, FORMED, "formed", "--")
    curves.set(xlabel="update", ylabel="recall probe R (median over seeds)", ylim=(0, 1.05))
    curves.legend(loc="center right", fontsize=7)
    joint = formed_together(data["joint_steps"], data["joint"])
    apart, censored = formed_apart(data["stage_updates"], budget)
    seeds = np.arange(len(joint))
    shown = np.where(np.isfinite(joint), joint, np.asarray(data["joint_steps"], dtype=float)[-1] + 1)
    bars.bar(seeds - 0.2, shown, 0.4, color=COLORS["untied"], label="together")
    bars.bar(seeds + 0.2, apart, 0.4, color=COLORS["tied"], label="one at a time")
    for seed in seeds[censored]:
        bars.bar(seed + 0.2, apart[seed], 0.4, color="none", edgecolor="black", hatch="//")
    bars.set(xlabel="seed", ylabel="updates until all three formed", xticks=seeds)
    bars.legend(fontsize=8)
    return fig


def _draw_parent_lines(
    ax: plt.Axes,
    weights: np.ndarray | list,
    parents: list[int],
    ylabel: str,
    bound_label: str = "the row's bound",
    span_label: str = "judged positions",
) -> None:
    """Each seed's weight on the parent per position (best head), the judged positions shaded, the bound dashed."""
    carried = np.nanmax(np.asarray(weights, dtype=float), axis=1)  # seed x head x position t >= 1
    positions = np.arange(1, carried.shape[1] + 1)
    judged = judged_positions(parents)
    ax.axvspan(judged[0] - 0.5, judged[-1] + 0.5, color=COLORS["theory"], alpha=0.08, label=span_label)
    for seed, row in enumerate(carried):
        ax.plot(positions, row, ".-", linewidth=0.8, markersize=3, label=f"seed {seed}")
    reference_line(ax, PARENT_MASS, bound_label, "--")
    ax.set(xlabel="position t", ylabel=ylabel, ylim=(0, 1.05))
    ax.legend(loc="lower left", fontsize=7, ncol=2)


def parent_weight(data: TrainingData) -> Figure:
    """Layer 1's weight on each position's parent, in the head that puts the most there, one line per two-layer
    seed; the first half of the positions (over which the tables summarise it) shaded, 1/2 dashed."""
    fig, ax = plt.subplots()
    _draw_parent_lines(
        ax,
        data["parent_weight"]["two_layers"],
        data["parents"],
        "weight on the parent (best head)",
        "1/2 (no row here)",
        "first half (the summary's positions)",
    )
    return fig


def staged(data: StagedData) -> Figure:
    """The first stage: layer 1's attention after the theorem's loss (first seed of the first run; it is the same
    for every input), and every seed's weight on the parent by position, on the theorem's loss and on the
    ablation's."""
    runs = data["runs"]
    fig, axes = plt.subplots(1, 4, figsize=(17.5, 4.0))
    first = runs[0]
    image = _draw_position_map(
        axes[0],
        np.asarray(first["attention"], dtype=float),
        first["parents"],
        f"layer 1 ({first['graph']})",
        "Greys",
        COLORS["tied"],
        0.0,
        1.0,
    )
    fig.colorbar(image, ax=axes[0], shrink=0.8, label="attention weight")
    for ax, loss, title in (
        (axes[1], "last token", "the theorem's loss: the last token"),
        (axes[2], "every position", "ablation: every position scored"),
    ):
        for run in (run for run in runs if run["loss"] == loss):
            weights = np.asarray(run["parent_weight"], dtype=float)[:, 0]  # seed x position t >= 1
            positions = np.arange(1, weights.shape[1] + 1)
            for seed, row in enumerate(weights):
                ax.plot(positions, row, ".-", linewidth=0.8, markersize=3, label=f"{run['graph']}, seed {seed}")
        reference_line(ax, PARENT_MASS, "the row's bound" if loss == "last token" else "the bound (no row)", "--")
        ax.set(xlabel="position t", ylabel="weight on the parent", ylim=(0, 1.05), title=title)
        ax.legend(loc="lower left", fontsize=7, ncol=2)
    _draw_second_stage(axes[3], data["second"])
    fig.tight_layout()
    return fig


def _draw_second_stage(ax: plt.Axes, second: SecondStage) -> None:
    """The reduced model's last-token loss against layer 2's scale with layer 1 the graph, the levels, and each seed
    after the first stage (at its scale) and after both (at its learned mean diagonal)."""
    ax.plot(second["scales"], second["scale_loss"], color=COLORS["theory"], label="layer 1 the graph (computed)")
    for name, style in (("unigram", ":"), ("smoothed", "--")):
        words = "in-context unigram" if name == "unigram" else "smoothed count estimator"
        reference_line(ax, second["levels"][name], words, style)
    first = second["loss"]["first"]
    ax.plot([second["first_scale"]] * len(first), first, "x", color=COLORS["tied"], label="after stage 1")
    ax.plot(second["match_scale"], second["loss"]["both"], "o", color=COLORS["untied"], label="after both stages")
    low, high = second["levels"]["smoothed"], max(second["levels"]["unigram"], max(first))
    ax.set(
        xlabel="layer 2's scale",
        ylabel="last-token loss (nats)",
        ylim=(low - 0.1 * (high - low), high + 0.3 * (high - low)),
    )
    ax.set_title("the second stage")
    ax.legend(loc="upper right", fontsize=7)


def corollary(data: CorollaryData) -> Figure:
    """On kernels outside the training prior: the last-token loss of the training prior's Bayes predictor, of the
    graph at its training scale (computed), of each seed after both stages, and of the count estimator."""
    levels = data["levels"]
    names = ["training prior's Bayes"] * ("prior_bayes" in levels) + ["graph at its scale (computed)"]
    values = [levels["prior_bayes"]] * ("prior_bayes" in levels) + [levels["graph"]]
    names += [f"seed {seed}" for seed in range(len(data["loss"]))] + ["smoothed count estimator"]
    values += list(data["loss"]) + [levels["smoothed"]]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    colors = [COLORS["theory"]] * (len(names) - len(data["loss"]) - 1) + [COLORS["untied"]] * len(data["loss"])
    ax.barh(names, values, color=colors + [COLORS["theory"]])
    low = min(values)
    ax.set(xlabel="last-token loss on kernels outside the prior (nats)", xlim=(low - 0.5 * (max(values) - low), None))
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def three_steps(data: ThreeStepsData) -> Figure:
    """Left: after the three steps at infinite width, the share of judged positions whose largest positional score
    in W_KQ1 is on the one before, against the second step's length, as the model is and with the first step's
    writing on layer 1's copies cut; the recall accuracy dotted, chance grey. Right: the three probes with random
    parts of finite width, stepped at the best of those lengths, the infinite-width values dashed."""
    fig, (sizes, widths) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"wspace": 0.3})
    fig.subplots_adjust(bottom=0.3)
    lengths = np.asarray(data["second_sizes"], dtype=float)
    sizes.plot(lengths, [previous_share(lags) for lags in data["lags"]], "o-", color=COLORS["untied"], label="W_KQ1")
    sizes.plot(
        lengths,
        [previous_share(lags) for lags in data["cut_lags"]],
        "s--",
        color=COLORS["tied"],
        label="W_KQ1, first step's writing on layer 1's copies cut",
    )
    sizes.plot(lengths, data["accuracy"], ":", color="grey", marker=".", label="recall accuracy")
    reference_line(sizes, data["chance"], "chance", ":")
    sizes.set(
        xscale="log",
        xlabel="length of the second step (on W_KQ2)",
        ylabel="share of positions 2..T-3 sent to the one before",
        ylim=(0, 1.05),
    )
    sizes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    names = ("W_OV2", "W_KQ2", "W_KQ1")
    colors = (COLORS["untied"], COLORS["tied"], "black")
    at = data["second_sizes"].index(data["widths_length"])
    probes_at = np.asarray(data["width_probes"], dtype=float)
    for index, (name, color) in enumerate(zip(names, colors)):
        shown = probes_at[:, index] if index < 2 else [previous_share(lags) for lags in data["width_lags"]]
        widths.plot(data["widths"], shown, "o-", color=color, label=name)
        limit = data["probes"][at][index] if index < 2 else previous_share(data["lags"][at])
        widths.axhline(limit, color=color, linestyle="--", linewidth=0.8)
    widths.set(
        xscale="log",
        xlabel=f"width d of random parts (second step of length {data['widths_length']:g})",
        ylabel="recall probe after three steps",
        ylim=(0, 1.05),
    )
    widths.legend(
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=3,
        title=f"dashed: orthonormal parts, d = {data['width']}",
        title_fontsize=7,
    )
    return fig
