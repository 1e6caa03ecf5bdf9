"""train.objective=sft runs the head on the completion positions only (bench/preference_step.py: at a 50304-id
vocabulary the head on every position made an SFT step ~2.8x a DPO step's time): the loss, the validation NLL and
every gradient equal the cross-entropy of the whole logits with the prompt and padding targets ignored
(F.cross_entropy's ignore_index, what the objective computed before), on the plain and the chunked paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slm.data.records import pad_rows
from slm.model import ModelConfig, Transformer
from slm.objectives.loss_settings import LossSettings
from slm.objectives.sft import SFT


def batch_and_model(vocab: int = 40) -> tuple[dict, Transformer]:
    gen = torch.Generator().manual_seed(0)
    lengths = [(5, 7), (2, 3), (9, 4), (1, 11)]  # (prompt, completion) tokens: padding in every row but one
    rand = lambda n: torch.randint(0, vocab, (n,), generator=gen).tolist()  # noqa: E731
    ids, scored = pad_rows([rand(p) for p, _ in lengths], [rand(c) for _, c in lengths], pad_id=0, context_length=32)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=2, d_model=32, attention={"head_dim": 16}, vocab_size=vocab,
                                    context_length=32))
    return {"ids": ids, "scored": scored}, model


def grads(model) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("impl", ["plain", "chunked"])
def test_sft_on_completion_positions_equals_the_masked_cross_entropy(impl):
    batch, model = batch_and_model()
    ids, scored = batch["ids"], batch["scored"]
    targets = ids[:, 1:].masked_fill(~scored, -100)
    reference = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
    reference.backward()
    expected = grads(model)

    objective = SFT(LossSettings(impl=impl, chunk_tokens=5))  # chunks of 5 rows: several per batch
    loss = objective.terms(model, batch)["loss"]
    loss.backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    for got, want in zip(grads(model), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        total, count = objective.nll(model, batch)
    assert count == int(scored.sum()) == 3 + 4 + 7 + 11
    assert float(total) == pytest.approx(reference.item() * count, rel=1e-6)
