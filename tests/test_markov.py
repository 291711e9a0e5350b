"""Every verdict row of the Markov chapter fails in a counterfactual: a wrong theory, a broken model, an untrained one."""  # noqa: E501

import re

import numpy as np
import pytest
import torch

from sandboxes.chapters import markov
from sandboxes.chapters.markov import judge, measure
from sandboxes.data.markov import MarkovChain, binary_kernel
from sandboxes.model import GPT
from sandboxes.theory import markov as theory
from sandboxes.theory.markov_flow import ReducedFlow
from sandboxes.trainer import TrainConfig, train

from conftest import TINY

GAP = judge.information_gap(0.5, 0.8)  # the featured chain, p+q > 1
GAP2 = judge.information_gap(0.2, 0.3)  # the contrast chain, p+q < 1


def _section(name: str) -> list:
    """The rows of one section of the chapter at unit-test scale (the exact sections ignore the scale)."""
    return markov.CHAPTER.start("quick", TINY["markov"], seeds=1, device="cpu").section(name).claims


def _shifted_bias(make):
    """A point-maker whose output bias is off by 0.1: a construction off by a constant."""

    def wrong(*args, **kwargs):
        model = make(*args, **kwargs)
        with torch.no_grad():
            model.head.bias[1] += 0.1
        return model

    return wrong


def _wrong_global_point(monkeypatch):
    monkeypatch.setattr(theory, "global_minimum_point", _shifted_bias(theory.global_minimum_point))
    return _section("global_minimum")


def _wrong_unigram_point(monkeypatch):
    monkeypatch.setattr(theory, "unigram_point", _shifted_bias(theory.unigram_point))
    return _section("unigram_point")


def _block_spectrum_off(monkeypatch):
    closed_form = theory.predicted_block_spectrum
    monkeypatch.setattr(theory, "predicted_block_spectrum", lambda p, q, d, tied: closed_form(p, q, d, tied) + 0.01)
    return _section("unigram_point")


def _mlp_beside_the_unigram_point(monkeypatch):
    right = theory.unigram_point
    monkeypatch.setattr(
        theory,
        "unigram_point",
        lambda p, q, d, length, tied: (
            ReducedFlow(p, q).gpt_weights(0.0, -0.9, d, length) if tied else right(p, q, d, length, tied)
        ),
    )
    return _section("unigram_point")


def _mlp_above_the_switch(monkeypatch):
    monkeypatch.setattr(measure, "OFF_HYPOTHESIS_W", 0.5)
    return _section("unigram_point")


def _wrong_sign_of_c(monkeypatch):
    curvature = theory.curvature
    monkeypatch.setattr(theory, "curvature", lambda p, q: -curvature(p, q))
    return _section("unigram_point")


def _hessian_of_the_other_tying(monkeypatch):
    hessian = theory.hessian_at_unigram_point
    monkeypatch.setattr(
        theory, "hessian_at_unigram_point", lambda p, q, d, length, tied: hessian(p, q, d, length, not tied)
    )
    return _section("hessian_sweep")


def _gpt_weights_off(monkeypatch):
    weights = ReducedFlow.gpt_weights
    monkeypatch.setattr(ReducedFlow, "gpt_weights", lambda self, e, w, d, length: weights(self, 1.1 * e, w, d, length))
    return _section("reduced_flow")


def _velocity_off(scale_e: float, scale_w: float):
    def apply(monkeypatch):
        velocity = ReducedFlow.velocity
        monkeypatch.setattr(
            ReducedFlow,
            "velocity",
            lambda self, e, w: tuple(s * v for s, v in zip((scale_e, scale_w), velocity(self, e, w))),
        )
        return _section("reduced_flow")

    return apply


class _ReversedFlow(ReducedFlow):
    """The reduced model with the sign of de/dt flipped: a wrong theory of its flow."""

    def velocity(self, e: float, w: float) -> tuple[float, float]:
        de, dw = super().velocity(e, w)
        return -de, dw


def _reversed_flow(monkeypatch):
    # only the axis reading flows the wrong theory: its other flows, integrated over t = 400, would take minutes
    moves = measure.axis_moves
    monkeypatch.setattr(measure, "axis_moves", lambda flow: moves(_ReversedFlow(flow.p, flow.q)))
    return _section("reduced_flow")


def _flow_of_the_mirrored_chain(monkeypatch):
    """A wrong theory of where flows end: each chain's flow replaced by that of (1 - p, 1 - q), across p + q = 1."""
    monkeypatch.setattr(measure, "ReducedFlow", lambda p, q: ReducedFlow(1 - p, 1 - q))
    return _section("reduced_flow")


SETTLED = 0.3 * np.linspace(1.0, 0.0, 40) ** 8  # a descent (minus its end) that has flattened out
STEPS = np.arange(40) * 10  # the evaluated steps of these made-up runs
NEVER = [np.inf] * 3  # escape steps of runs that never left the unigram plateau
EARLY = [30.0, 40.0, 50.0]  # escape steps of runs that left it early


def _run(p, q, tied, excess, escape=EARLY):
    """A finished run of three seeds: every loss has settled at the entropy rate plus ``excess``."""
    excess = np.asarray(excess, dtype=float)
    end = theory.entropy_rate(binary_kernel(p, q)) + excess
    return {
        "p": p,
        "q": q,
        "tied": tied,
        "excess": excess,
        "still_descending": [False] * len(excess),
        "eval_steps": STEPS,
        "eval_loss": end[:, None] + SETTLED,
        "escape_step": np.asarray(escape, dtype=float),
    }


def _stalled_halfway(monkeypatch):  # a broken model: every run settles between the two minima
    return judge.training_rows(
        [
            _run(0.2, 0.3, True, [GAP2 / 2] * 3),
            _run(0.2, 0.3, False, [GAP2 / 2] * 3),
            _run(0.5, 0.8, False, [GAP / 2] * 3),
        ],
        0.02,
    )


def _weights_run(models: list, initial: list, tied: bool = True) -> dict:
    """A settled run of the contrast chain whose weights are ``models``, started from ``initial``."""
    return {
        **_run(0.2, 0.3, tied, [0.0] * len(models)),
        **measure.weight_shapes(models),
        "initial": measure.weight_shapes(initial),
    }


def _untrained(d_model: int = 8, length: int = 64, tied: bool = True) -> list:
    return measure.initial_models(lambda: GPT(theory.binary_config(d_model, length, tied)), [0, 1, 2])


def _untrained_weights(monkeypatch):  # an untrained model: a settled run whose weights are still the initialisation
    return judge.weight_rows([_weights_run(_untrained(), _untrained())])[0]


def _rank_one_and_constant(d_model: int = 8, length: int = 64) -> list:
    """Models whose MLP matrices are rank one and whose positional table is one vector at every position."""
    models = _untrained(d_model, length)
    with torch.no_grad():
        for model in models:
            mlp = model.blocks[0].mlp
            mlp.fc.weight.copy_(torch.outer(torch.arange(1.0, 4 * d_model + 1), torch.ones(d_model)))
            mlp.proj.weight.copy_(torch.outer(torch.ones(d_model), torch.arange(1.0, 4 * d_model + 1)))
            model.wpe.copy_(torch.ones(length, d_model))
    return models


def test_the_weight_rows_hold_on_rank_one_weights_and_constant_positions_and_only_for_tied_runs_below_the_line():
    runs = [_weights_run(_rank_one_and_constant(), _untrained()), _weights_run(_untrained(), _untrained(), tied=False)]
    claims, silent = judge.weight_rows(runs)
    assert len(claims) == 2 and all(c.holds for c in claims) and silent == ()


def test_no_weight_row_where_untrained_weights_already_pass():
    # at d_model = 2 every 8 x 2 MLP matrix has rank 2 and puts at least half its norm in one direction
    claims, silent = judge.weight_rows([_weights_run(_rank_one_and_constant(2, 64), _untrained(2, 64))])
    assert [c.name for c in claims] == [judge.weight_rows([_weights_run(_untrained(), _untrained())])[0][1].name]
    assert len(silent) == 1 and "untrained weights already reach" in silent[0]


def test_the_initial_models_are_the_trainers_initialisation_and_leave_the_generators_alone():
    make = measure._binary_model({"d_model": 8, "init_std": 0.02}, True, 16)
    before = torch.get_rng_state()
    initial = measure.initial_models(make, [3, 5])
    assert torch.equal(before, torch.get_rng_state())
    trained = train(make, MarkovChain.binary(0.2, 0.3, 16), TrainConfig(steps=1, batch_size=2, lr=0.0), [3, 5])
    for a, b in zip(initial, trained.models):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_the_weight_shapes_split_attention_and_read_a_rank_one_matrix_and_a_constant_table_as_such():
    model = _rank_one_and_constant(8, 16)[0]
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[:8].copy_(torch.outer(torch.ones(8), torch.arange(1.0, 9.0)))  # the query
    shapes = measure.weight_shapes([model])
    assert theory.top_share(shapes["spectra"]["blocks.0.mlp.fc.weight"])[0] == pytest.approx(1.0)
    assert theory.top_share(shapes["spectra"]["blocks.0.attn.query.weight"])[0] == pytest.approx(1.0)
    assert theory.top_share(shapes["spectra"]["blocks.0.attn.key.weight"])[0] < 0.9
    assert shapes["positions_constant"] == [pytest.approx(1.0)]


def _tying_changes_nothing(monkeypatch):  # a wrong theory: tied runs leave the plateau as early as untied ones
    return judge.training_rows([_run(0.5, 0.8, True, [0.0] * 3, EARLY), _run(0.5, 0.8, False, [0.0] * 3, EARLY)], 0.02)


def _tied_order(tied_escape, untied_escape):
    """Two groups (cells, scales or switching probabilities), each with these escape steps."""
    return {"tied": np.array([tied_escape] * 2, dtype=float), "untied": np.array([untied_escape] * 2, dtype=float)}


TIED_NEVER_UNTIED_EARLY = _tied_order(NEVER, EARLY)  # the usual order: tied runs stay, untied ones leave early


def _phase(kind: str, side: str, escape=TIED_NEVER_UNTIED_EARLY):
    """Phase-diagram rows in which the ``kind`` runs on the ``side`` (< or >) of p+q = 1 settled between the minima."""

    def apply(monkeypatch):
        gaps = np.array([GAP2, GAP])
        excess = {k: np.zeros((2, 3)) for k in ("tied", "untied")}
        if kind:
            excess[kind][0 if side == "<" else 1] = 0.6 * gaps[0 if side == "<" else 1]
        waiting = {k: np.zeros((2, 3), dtype=bool) for k in ("tied", "untied")}
        return judge.phase_rows([0.5, 1.3], excess, gaps, waiting, escape, 0.02)

    return apply


def _basin(p: float, q: float, tied_end: str = "bigram", untied_end: str = "bigram", escape=TIED_NEVER_UNTIED_EARLY):
    """Basin rows at scales (0.01, 0.02): settled seeds ending at ``tied_end`` and ``untied_end``."""

    def apply(monkeypatch):
        ends = {"tied": np.full((2, 3), tied_end), "untied": np.full((2, 3), untied_end)}
        waiting = {k: np.zeros((2, 3), dtype=bool) for k in ("tied", "untied")}
        return judge.basin_rows(p, q, [0.01, 0.02], ends, waiting, escape)

    return apply


def _depth_run(excess: float, plateau: bool, depth: int = 2, tied: bool = True, moving: bool = False) -> dict:
    """Two seeds whose loss settles at the entropy rate plus ``excess`` (after a plateau at H(pi) if ``plateau``)."""
    H_pi = theory.unigram_entropy(binary_kernel(0.5, 0.8))
    end = H_pi - GAP + excess
    loss = np.concatenate([np.full(15, H_pi), end + SETTLED]) if plateau else end + SETTLED
    return {
        "depth": depth,
        "tied": tied,
        "eval_steps": np.arange(len(loss)),
        "eval_loss": np.tile(loss, (2, 1)),
        "excess": np.full(2, excess),
        "still_descending": np.full(2, moving),
    }


def _depth(excess: float, plateau: bool):
    def apply(monkeypatch):
        H_pi = theory.unigram_entropy(binary_kernel(0.5, 0.8))
        return [
            row
            for tied in (True, False)
            for depth in (2, 4)
            for row in judge.depth_run_rows(0.5, 0.8, _depth_run(excess, plateau, depth, tied), H_pi)
        ]

    return apply


def _spectrum_negated(monkeypatch):
    spectrum = theory.embedding_block_spectrum
    monkeypatch.setattr(theory, "embedding_block_spectrum", lambda k, d, length: -spectrum(k, d, length))
    return _section("multistate")


def _multistate(tied_below: float, untied: float, escape=TIED_NEVER_UNTIED_EARLY):
    """Multi-state rows at p = 0.3 and 0.9 (p* = 0.8) whose settled runs end at these excess / gap ratios."""

    def apply(monkeypatch):
        gaps = np.array([0.5, 0.04])
        ratios = {"tied": np.array([[tied_below] * 3, [1.0] * 3]), "untied": np.full((2, 3), untied)}
        waiting = {kind: np.zeros((2, 3), dtype=bool) for kind in ("tied", "untied")}
        return judge.multistate_rows(5, [0.3, 0.9], gaps, ratios, waiting, escape, 0.02)

    return apply


# row (a regular expression on its name) -> a counterfactual in which it must fail
COUNTERFACTUALS = {
    r"Thm 1 \(tied\): loss of theta_\*": _wrong_global_point,
    r"Thm 1 \(untied\): loss of theta_\*": _wrong_global_point,
    r"Thm 1 \(tied\): gradient at theta_\*": _wrong_global_point,
    r"Thm 1 \(untied\): gradient at theta_\*": _wrong_global_point,
    r"Thm 2 \(tied\): loss of theta_pi": _wrong_unigram_point,
    r"Thm 3 \(untied\): loss of theta_pi": _wrong_unigram_point,
    r"Thm 2 \(tied\): gradient at theta_pi": _wrong_unigram_point,
    r"Thm 3 \(untied\): gradient at theta_pi": _wrong_unigram_point,
    r"Thm 2 \(tied\): Hessian \(e, a, b\) block": _block_spectrum_off,
    r"Thm 3 \(untied\): Hessian \(e, a, b\) block": _block_spectrum_off,
    r"random directions that lower the loss": _mlp_beside_the_unigram_point,
    r"Thm 2 needs its hypothesis": _mlp_above_the_switch,
    r"Thm 3 \(untied\): theta_pi is a saddle": _wrong_sign_of_c,
    r"Hessian sweep over p\+q": _hessian_of_the_other_tying,
    r"tied Hessian sign along the sweep": _hessian_of_the_other_tying,
    r"reduced model .*: two-scalar loss": _gpt_weights_off,
    r"reduced model .*: E = .* conserved": _velocity_off(1.0, 2.0),
    r"reduced model .*: flows from e = ": _reversed_flow,
    r"reduced model .*: most Gaussian starts": _flow_of_the_mirrored_chain,
    r"\(0.2, 0.3\) tied: every seed reaches the entropy rate": _stalled_halfway,
    r"untied: every seed reaches the entropy rate": _stalled_halfway,
    r"tied runs leave the unigram plateau after every untied run": _tying_changes_nothing,
    r"MLP weights W_1 and W_2 approximately rank one": _untrained_weights,
    r"positional embeddings approximately constant": _untrained_weights,
    r"phase diagram: tied runs trapped where p\+q<1": _phase("tied", "<"),
    r"phase diagram: untied runs trapped where p\+q<1": _phase("untied", "<"),
    r"phase diagram: untied runs trapped where p\+q>1": _phase("untied", ">"),
    r"phase diagram: cells with p\+q>1 where a tied run left": _phase("", ">", _tied_order(EARLY, EARLY)),
    r"basin .*: untied seeds from init std <= 0.02 that do not reach": _basin(0.5, 0.8, untied_end="neither"),
    r"basin \(0.2, 0.3\): tied seeds from init std <= 0.02 that do not reach": _basin(0.2, 0.3, tied_end="neither"),
    r"basin .*: init stds <= 0.02 at which a tied seed left": _basin(0.5, 0.8, escape=_tied_order(EARLY, EARLY)),
    r"depth \d+ (un)?tied .*: every seed reaches the entropy rate": _depth(GAP / 2, True),  # settled between the minima
    r"depth 2 tied: shortest rest on the unigram plateau": _depth(0.0, False),
    r"state tied unigram point: embedding Hessian": _spectrum_negated,
    r"state tied Hessian sign along the p sweep": _spectrum_negated,
    r"state chain, untied: worst excess loss": _multistate(0.0, 0.5),
    r"state chain, tied, p < p\*": _multistate(0.5, 0.0),
    r"state chain, p > p\*: switching probabilities at which a tied run left": _multistate(
        0.0, 0.0, _tied_order(EARLY, EARLY)
    ),
}


@pytest.mark.parametrize("row", list(COUNTERFACTUALS))
def test_row_fails_in_its_counterfactual(row, monkeypatch):
    claims = [c for c in COUNTERFACTUALS[row](monkeypatch) if re.search(row, c.name)]
    assert claims and all(c.holds is False for c in claims), [c.name for c in claims]


def _covered(name: str) -> bool:
    return any(re.search(row, name) for row in COUNTERFACTUALS)


def test_every_row_the_chapter_emits_has_a_counterfactual(tiny_result):
    assert [c["name"] for c in tiny_result("markov")["claims"] if not _covered(c["name"])] == []


def test_every_row_of_the_contrast_settings_has_a_counterfactual():
    # the featured chain swapped for the contrast one, and the multi-state sweep on both sides of p*
    run = markov.CHAPTER.start("quick", {**TINY["markov"], "p": 0.2, "q": 0.3}, seeds=1, device="cpu")
    names = [c.name for section in ("unigram_point", "reduced_flow") for c in run.section(section).claims]
    names += [c.name for c in _multistate(0.0, 0.0)(None) + _basin(0.2, 0.3)(None) + _phase("", ">")(None)]
    assert [n for n in names if not _covered(n)] == []


def test_the_rows_hold_without_a_change(tiny_result):
    # the counterfactuals above break one thing each: with nothing broken, the same rows hold
    exact = ("global_minimum", "unigram_point", "hessian_sweep", "reduced_flow")
    assert all(c["holds"] for c in tiny_result("markov")["claims"] if c["section"] in exact)
    learned = [
        _run(0.5, 0.8, True, [GAP] * 3, NEVER),
        _run(0.2, 0.3, True, [0.0] * 3),
        _run(0.5, 0.8, False, [0.0] * 3),
        _run(0.2, 0.3, False, [0.0] * 3),
    ]
    assert all(c.holds for c in judge.training_rows(learned, 0.02)) and len(judge.training_rows(learned, 0.02)) == 4
    assert all(c.holds for c in _phase("", "<")(None)) and len(_phase("", "<")(None)) == 4
    assert all(c.holds for c in _basin(0.5, 0.8)(None) + _basin(0.2, 0.3)(None))
    assert all(c.holds for c in _depth(0.0, True)(None)) and len(_depth(0.0, True)(None)) == 5
    assert all(c.holds for c in _multistate(0.0, 0.0)(None)) and len(_multistate(0.0, 0.0)(None)) == 3


def test_rows_about_an_escape_are_undecided_while_a_seed_waits_on_the_plateau_or_descends():
    # the budget ran out before the escape: the paper's Fig. 1 says it comes, so the row must not say "fails"
    H_pi = theory.unigram_entropy(binary_kernel(0.5, 0.8))
    # settled on the plateau: the escape had not come
    depth = judge.depth_run_rows(0.5, 0.8, _depth_run(GAP, True), H_pi)
    assert depth[0].holds is None and "depth_steps" in depth[0].reason
    depth = judge.depth_run_rows(0.5, 0.8, _depth_run(GAP / 2, True, moving=True), H_pi)
    assert depth[0].holds is None
    descending = _run(0.2, 0.3, True, [GAP2 / 2] * 3) | {"still_descending": [False, True, False]}
    assert judge.training_rows([descending], 0.02)[0].holds is None
    on_the_plateau = _run(0.2, 0.3, True, [GAP2] * 3)  # settled where a plateau sits: no budget says it stays
    assert judge.training_rows([on_the_plateau], 0.02)[0].holds is None
    assert judge.training_rows([_run(0.2, 0.3, True, [GAP2 / 2] * 3)], 0.02)[0].holds is False  # settled halfway


def test_a_tied_run_that_stays_on_the_plateau_is_never_called_trapped():
    # Thm 2 is local: no budget shows that training converges to theta_pi, so no row says so; the order row is
    # decided by the untied runs leaving first, and undecided while neither has left
    rows = judge.training_rows([_run(0.5, 0.8, True, [GAP] * 3, NEVER), _run(0.5, 0.8, False, [GAP] * 3, NEVER)], 0.02)
    assert [(c.name.split(":")[0], c.holds) for c in rows] == [("(0.5, 0.8)", None), ("(0.5, 0.8) untied", None)]
    assert "--set steps=" in rows[0].reason
    assert not [c for c in rows if "ends at the unigram" in c.name or "trapped" in c.name]
    assert _phase("", ">", _tied_order(NEVER, NEVER))(None)[-1].holds is None
    one_fails_one_waits = {"tied": np.array([EARLY, NEVER]), "untied": np.array([EARLY, NEVER])}
    assert _basin(0.5, 0.8, escape=one_fails_one_waits)(None)[-1].holds is False


def test_order_rows_are_made_only_from_the_seeds_small_initialisation():
    runs = [_run(0.5, 0.8, True, [GAP] * 3, NEVER), _run(0.5, 0.8, False, [0.0] * 3)]
    assert [c.name for c in judge.training_rows(runs, 0.3) if "after every untied" in c.name] == []
    result = markov.CHAPTER.run(
        "quick", {**TINY["markov"], "init_std": 0.3}, seeds=1, device="cpu", sections=["training"]
    )
    assert any("init std 0.3" in note for note in result.sections["training"]["silent"])


def test_a_chain_on_the_line_p_plus_q_one_gets_no_trained_row_and_the_output_says_why():
    settings = {**TINY["markov"], "p": 0.4, "q": 0.6}
    result = markov.CHAPTER.run(
        "quick",
        {**settings, "flow_points": 4},
        seeds=1,
        device="cpu",
        sections=["unigram_point", "depth", "basin", "reduced_flow"],
    )
    assert [c.name for c in result.claims if c.section in ("depth", "basin")] == []
    assert [c.name for c in result.claims if "(0.4, 0.6): flows" in c.name or "(0.4, 0.6): most" in c.name] == []
    assert all(result.sections[name]["silent"] for name in ("unigram_point", "depth", "basin", "reduced_flow"))
    assert all(c.holds for c in result.claims)


def test_the_hypothesis_row_resolves_a_chain_just_past_the_line():
    # a reader's value: p+q = 1.011 made the drop along random directions smaller than round-off
    result = markov.CHAPTER.run("quick", {"p": 0.5, "q": 0.511}, seeds=1, device="cpu", sections=["unigram_point"])
    row = next(c for c in result.claims if c.name.startswith("Thm 2 needs its hypothesis"))
    assert row.holds and float(row.measured) < -100 * judge.EXACT


def test_a_run_that_never_came_down_to_the_plateau_never_holds_the_order_row():
    # an untrained or broken tied model stays near ln 2, above H(pi): it never left, but it never lingered either;
    # undecided (not failed) because tiny budgets end there too, and the default profiles admit no undecided row
    H_pi = theory.unigram_entropy(binary_kernel(0.5, 0.8))
    stuck_above = judge.escape_steps(np.arange(5), np.full((3, 5), np.log(2)), H_pi, GAP)
    assert np.isnan(stuck_above).all()
    row = judge.later_escape_row("order", [stuck_above], [np.array(EARLY, dtype=float)], "steps", count=False)
    assert row.holds is None and "never came down" in row.measured


def test_a_loss_that_falls_straight_through_the_plateau_does_not_rest_on_it():
    H_pi = theory.unigram_entropy(binary_kernel(0.5, 0.8))
    through = np.linspace(np.log(2), H_pi - GAP, 11)[None]  # one evaluation in the band, then below
    assert judge.plateau_rest(np.arange(11) * 10, through, H_pi, GAP)[0] < 1
    rests = np.concatenate([[np.log(2)], np.full(5, H_pi), np.full(5, H_pi - GAP)])[None]
    assert judge.plateau_rest(np.arange(11) * 10, rests, H_pi, GAP)[0] == 5
