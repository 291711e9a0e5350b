"""The shared GPT and LSTM: options do what they say."""

import pytest
import torch

from sandboxes.model import (
    FUSED_FROM,
    GPT,
    LSTM,
    AssociativeMemories,
    CausalSelfAttention,
    GPTConfig,
    count_parameters,
    paired_gpt,
)


def small(**kw) -> GPTConfig:
    return GPTConfig(**{"vocab_size": 5, "block_size": 16, "d_model": 8, "n_head": 2, **kw})


def test_tied_model_shares_input_and_output_embedding():
    model = GPT(small(tied=True))
    assert model.head.weight is model.wte.weight
    with torch.no_grad():
        model.wte.weight[1, 0] = 3.0
    assert model.head.weight[1, 0] == 3.0
    assert count_parameters(GPT(small(tied=False))) - count_parameters(model) == 5 * 8


def test_untied_model_has_its_own_output_matrix():
    model = GPT(small(tied=False))
    assert model.head.weight.data_ptr() != model.wte.weight.data_ptr()


def test_attention_off_removes_attention_parameters_and_mixing():
    model = GPT(small(attention=False))
    assert not any("attn" in name for name, _ in model.named_parameters())
    x = torch.randint(0, 5, (2, 10))
    y = x.clone()
    y[:, 0] = (y[:, 0] + 1) % 5  # change the first token only
    # without attention, position t sees token t only, so later outputs are unchanged
    assert torch.equal(model(x)[:, 1:], model(y)[:, 1:])


def test_attention_is_causal():
    model = GPT(small())
    x = torch.randint(0, 5, (2, 10))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 5
    assert torch.allclose(model(x)[:, :-1], model(y)[:, :-1])


def test_attention_without_the_mask_reads_later_tokens_even_where_the_fused_kernel_would_run():
    for T in (10, FUSED_FROM):
        model = GPT(small(causal=False, block_size=T, positional="none"))
        x = torch.randint(0, 5, (2, T))
        y = x.clone()
        y[:, -1] = (y[:, -1] + 1) % 5
        assert not torch.allclose(model(x)[:, 0], model(y)[:, 0])


def test_a_classifier_head_gives_its_own_number_of_logits():
    assert GPT(small(tied=False, n_outputs=2))(torch.randint(0, 5, (3, 7))).shape == (3, 7, 2)


def test_mlp_off_removes_the_mlp():
    assert not any("mlp" in name for name, _ in GPT(small(mlp=False)).named_parameters())


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "linear", "none"])
def test_every_positional_encoding_runs_and_none_is_permutation_equivariant_without_attention(positional):
    model = GPT(small(positional=positional, attention=False))
    x = torch.randint(0, 5, (1, 12))
    out = model(x)
    assert out.shape == (1, 12, 5)
    if positional == "none":
        perm = torch.randperm(12)
        assert torch.allclose(model(x[:, perm]), out[:, perm])


def test_attention_weights_come_back_per_layer_and_head_and_sum_to_one():
    model = GPT(small(n_layer=3))
    logits, attention = model(torch.randint(0, 5, (4, 9)), return_attention=True)
    assert len(attention) == 3
    for weights in attention:
        assert weights.shape == (4, 2, 9, 9)
        assert torch.allclose(weights.sum(-1), torch.ones(4, 2, 9))
        assert torch.all(weights.triu(1) == 0)


def test_layer_norm_option_adds_norms():
    names = [n for n, _ in GPT(small(layer_norm=True)).named_parameters()]
    assert any(n.startswith("ln_f") for n in names)
    assert not any("ln" in n for n, _ in GPT(small(layer_norm=False)).named_parameters())


def test_sequence_longer_than_block_size_is_refused():
    with pytest.raises(ValueError, match="exceeds block_size"):
        GPT(small())(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"d_model": 9, "n_head": 2}, "divisible"),
        ({"positional": "rope"}, "positional"),
        ({"n_layer": 0}, "at least 1"),
        ({"n_outputs": 2}, "tied"),
    ],
)
def test_bad_configs_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        small(**kw)


def test_initialisation_scale_follows_init_std():
    torch.manual_seed(0)  # unseeded, it drew from whatever state earlier tests left (one CI run: 2.8 std errors off)
    model = GPT(small(init_std=0.5, d_model=64, n_head=1))
    # 320 samples: the sample std's error is 0.5 / sqrt(2 * 320) = 0.02; four of them
    assert abs(float(model.wte.weight.detach().std()) - 0.5) < 0.08


def test_lstm_maps_tokens_to_logits():
    assert LSTM(vocab_size=5, hidden=16)(torch.randint(0, 5, (3, 7))).shape == (3, 7, 5)


def test_recency_slope_of_zero_is_plain_causal_attention():
    torch.manual_seed(0)
    plain = CausalSelfAttention(small())
    biased = CausalSelfAttention(small(recency_slope=1e-30))
    biased.load_state_dict(plain.state_dict())
    x = torch.randn(3, 6, 8)
    torch.testing.assert_close(biased(x)[0], plain(x)[0])


def test_recency_slope_favours_recent_positions():
    attention = CausalSelfAttention(small(n_head=1, recency_slope=2.0))
    torch.nn.init.zeros_(attention.qkv.weight)
    _, weights = attention(torch.randn(1, 6, 8), need_weights=True)
    last = weights[0, 0, -1]
    assert torch.all(last[1:] > last[:-1])  # with equal scores the bias alone orders them
    torch.testing.assert_close(last[1:] / last[:-1], torch.full((5,), 2.0).exp())


@pytest.mark.parametrize("recency_slope", [0.0, 0.7])
def test_the_fused_attention_equals_the_one_that_returns_its_weights(recency_slope):
    # training takes the fused kernel (no T x T weights stored); figures and penalties take the explicit one
    torch.manual_seed(0)
    attention = CausalSelfAttention(small(n_head=2, recency_slope=recency_slope, block_size=FUSED_FROM))
    x = torch.randn(3, FUSED_FROM, 8)
    fused, none = attention(x)
    explicit, weights = attention(x, need_weights=True)
    assert none is None and weights.shape == (3, 2, FUSED_FROM, FUSED_FROM)
    torch.testing.assert_close(fused, explicit)


def test_the_simplified_model_trains_three_memories_from_zero_on_fixed_random_embeddings():
    torch.manual_seed(0)
    model = AssociativeMemories(vocab_size=7, block_size=6, d_model=16)
    assert sorted(name for name, _ in model.named_parameters()) == ["kq1", "kq2", "ov2"]
    assert all(float(p.detach().abs().max()) == 0.0 for p in model.parameters())
    idx = torch.randint(7, (3, 6), generator=torch.Generator().manual_seed(1))
    logits, (first, second) = model(idx, return_attention=True)
    uniform = torch.tril(torch.ones(6, 6)) / torch.arange(1, 7)[:, None]
    assert torch.allclose(first[:, 0], uniform.expand(3, 6, 6))
    assert torch.allclose(second[:, 0], uniform.expand(3, 6, 6))
    x = model.tokens[idx] + model.positions[:6]
    h1 = x + uniform @ x @ model.ov1.T  # layer 2 writes nothing while W_OV2 is zero
    assert torch.allclose(logits, h1 @ model.outputs.T, atol=1e-6)


def test_the_simplified_models_layer_2_scores_get_no_gradient_before_it_writes():
    # with W_OV2 = 0, layer 2's attention changes nothing, so W_OV2 must move before W_KQ2 can (Bietti et al.)
    torch.manual_seed(0)
    model = AssociativeMemories(vocab_size=7, block_size=6, d_model=16)
    idx = torch.randint(7, (4, 6), generator=torch.Generator().manual_seed(2))
    loss = torch.nn.functional.cross_entropy(model(idx).reshape(-1, 7), idx.roll(-1, dims=1).reshape(-1))
    grad_kq2, grad_ov2 = torch.autograd.grad(loss, [model.kq2, model.ov2])
    assert float(grad_kq2.abs().max()) == 0.0 and float(grad_ov2.abs().max()) > 0.0


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "linear", "none"])
def test_an_offset_column_shifts_every_position_and_zero_changes_nothing(positional):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=5, block_size=32, n_layer=2, n_head=2, d_model=8, positional=positional)
    plain, shifted = GPT(config), GPT(GPTConfig(**{**config.__dict__, "offset_input": True}))
    shifted.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 5, (3, 10))
    offsets = torch.tensor([[0], [4], [7]])
    out = shifted(torch.cat([offsets, idx], dim=1))
    torch.testing.assert_close(out[0], plain(idx)[0])
    if positional != "none":  # the shifted rows read positions 4..13 and 7..16, so they differ from position 0's
        assert not torch.allclose(out[1], plain(idx[1:2])[0])
        expected = plain.positions(17)[7:17]
        torch.testing.assert_close(shifted.positions(10, offsets)[2], expected)
    else:
        torch.testing.assert_close(out, plain(idx))


def test_a_normalised_attention_output_is_wen_et_al_s_layer_and_needs_the_input_norm_off():
    config = GPTConfig(vocab_size=5, block_size=8, d_model=8, norm_attention_output=True, tied=False)
    model = GPT(config)
    x = torch.randint(5, (3, 6))
    block, stream = model.blocks[0], model.embed(x)
    attended, _ = block.attn(stream)
    after = stream + block.ln_out(attended)
    assert torch.allclose(block(stream)[0], after + block.mlp(after))
    with pytest.raises(ValueError, match="layer_norm off"):
        GPTConfig(vocab_size=5, block_size=8, layer_norm=True, norm_attention_output=True)


def test_a_paired_model_reads_both_inputs_of_each_pair_as_the_model_reads_them_alone():
    torch.manual_seed(0)
    paired = paired_gpt(GPTConfig(vocab_size=5, block_size=8, d_model=8))
    pairs = torch.randint(5, (3, 2, 6))
    out = paired(pairs)
    assert out.shape == (3, 2, 6, 5)
    assert torch.allclose(out[:, 1], paired.model(pairs[:, 1]))


def test_frozen_embeddings_are_unit_scale_buffers_that_training_leaves_alone():
    config = GPTConfig(
        vocab_size=10, block_size=8, n_layer=2, d_model=64, tied=False, head_bias=False, frozen_embeddings=True
    )
    torch.manual_seed(0)
    model = GPT(config)
    names = {name for name, _ in model.named_parameters()}
    assert not names & {"wte.weight", "wpe", "head.weight"}
    assert {"wte.weight", "wpe", "head.weight"} <= {name for name, _ in model.named_buffers()}
    assert float(model.wte.weight.norm(dim=1).mean()) == pytest.approx(1.0, abs=0.15)
    fixed = model.wte.weight.clone()
    model(torch.randint(10, (2, 8))).sum().backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    assert torch.equal(model.wte.weight, fixed)
    with pytest.raises(ValueError, match="untied"):
        GPTConfig(vocab_size=10, block_size=8, frozen_embeddings=True)
