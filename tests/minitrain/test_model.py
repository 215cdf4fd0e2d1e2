import math

import pytest
import torch

from minitrain.model import MiniGPTConfig, build_minigpt, count_parameters

CONFIG = MiniGPTConfig(vocab_size=300, block_size=64)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return build_minigpt(CONFIG.vocab_size, block_size=CONFIG.block_size)


def test_builder_passes_the_config_fields():
    model = build_minigpt(50, block_size=16, n_layer=1, n_head=2, n_embd=32)
    assert model.config == MiniGPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=32)
    assert len(model.blocks) == 1 and model.tok_emb.weight.shape == (50, 32)
    assert build_minigpt(50).config == MiniGPTConfig(vocab_size=50)  # the rest: the defaults
    with pytest.raises(TypeError):
        build_minigpt(50, n_layers=3)  # a misspelt field is an error, not ignored


def test_shapes_and_loss(model):
    inputs = torch.randint(CONFIG.vocab_size, (4, 32))
    out = model((inputs, inputs))
    assert out.logits.shape == (4, 32, CONFIG.vocab_size)
    assert out.loss.shape == ()
    assert model((inputs, None)).loss is None


def test_initial_loss_is_close_to_uniform(model):
    inputs = torch.randint(CONFIG.vocab_size, (8, 64))
    loss = model((inputs, torch.randint(CONFIG.vocab_size, (8, 64)))).loss.item()
    assert abs(loss - math.log(CONFIG.vocab_size)) < 0.1


def test_head_is_tied_and_counted_once(model):
    assert model.head.weight is model.tok_emb.weight
    untied = sum(p.numel() for p in model.state_dict().values())
    assert count_parameters(model) == untied - CONFIG.vocab_size * CONFIG.n_embd


def test_default_size_is_a_few_hundred_thousand_parameters(model):
    assert 200_000 <= count_parameters(model) <= 1_000_000


def test_attention_is_causal(model):
    model.eval()
    a = torch.randint(CONFIG.vocab_size, (1, 16))
    b = a.clone()
    b[0, 10:] = (b[0, 10:] + 1) % CONFIG.vocab_size  # change only the future
    la, lb = model((a, None)).logits, model((b, None)).logits
    assert torch.equal(la[0, :10], lb[0, :10])
    assert not torch.equal(la[0, 10:], lb[0, 10:])


def test_too_long_sequence_is_rejected(model):
    with pytest.raises(ValueError, match="block_size"):
        model((torch.zeros(1, CONFIG.block_size + 1, dtype=torch.long), None))


def test_overfits_one_small_batch(model):
    inputs = torch.randint(CONFIG.vocab_size, (2, 16))
    targets = torch.randint(CONFIG.vocab_size, (2, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = model((inputs, targets)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert loss.item() < 0.1
