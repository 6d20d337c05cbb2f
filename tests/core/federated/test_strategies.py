"""SummedStatistics, the STATISTICS kind's strategy: a sum of the parties' statistics, then the family's step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedtopic_pipelines.core.federated.aggregation import UpdateRejected
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import SummedStatistics
from fedtopic_pipelines.core.models.pctd import server_step

STATS = UpdateKind.STATISTICS


class Topics(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.topic_word = nn.Parameter(torch.full((2, 3), 1 / 3, dtype=torch.float64), requires_grad=False)
        self.doc_topic = nn.Parameter(torch.zeros(4, 2, dtype=torch.float64), requires_grad=False)  # local


def _em_step(params: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], iteration: int) -> dict[str, float]:
    step = server_step(sums["topic_word"].numpy(), None, 0.0)
    params["topic_word"].copy_(torch.from_numpy(step.topic_word))
    return {"clipped": float(step.clipped), "empty_topics": float(step.empty_topics), "iteration": float(iteration)}


def _strategy() -> SummedStatistics:
    return SummedStatistics(Topics(), _em_step, shared=["topic_word"], metric_names=["loss"])


def _update(values, client: str = "a", n: int = 2) -> Update:
    return Update(client, STATS, {"topic_word": torch.tensor(values, dtype=torch.float64)}, n, metrics={"loss": 1.0})


def test_the_parties_statistics_are_summed_then_normalised_with_clipping_counted() -> None:
    strategy = _strategy()
    updates = [_update([[1.0, 2.0, 0.5], [0.0, 1.0, 1.0]], "a"), _update([[1.0, -1.0, -0.6], [2.0, 1.0, 1.0]], "b")]
    for u in updates:
        strategy.validate(u, capacity=2)
    recorded = strategy.aggregate(updates, measure=True)
    expected = np.array([[2 / 3, 1 / 3, 0.0], [2 / 6, 2 / 6, 2 / 6]])
    np.testing.assert_allclose(strategy.model.topic_word.detach().numpy(), expected, atol=1e-9)
    assert recorded["clipped"] == 1.0 and recorded["empty_topics"] == 0.0
    assert recorded["relative_change"] > 0
    assert recorded["iteration"] == 1.0  # combine learns which iteration it is (the accountant's T)
    assert strategy.aggregate(updates, measure=False)["iteration"] == 2.0
    assert set(strategy.instruction(0).state) == {"topic_word"}  # p(z|d) is the party's own
    assert strategy.instruction(0).config["action"] == "statistics"


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (_update([[1.0, 2.0], [0.0, 1.0]]), "shape"),
        (_update([[float("nan"), 2.0, 1.0], [0.0, 1.0, 1.0]]), "NaN or Inf"),
        (_update([[1.0, 2.0, 1.0], [0.0, 1.0, 1.0]], n=3), "exceeds the 2 this client declared"),
        (Update("a", UpdateKind.WEIGHTS, {"topic_word": torch.zeros(2, 3, dtype=torch.float64)}, 1), "expects"),
    ],
)
def test_a_party_with_wrong_statistics_is_rejected_with_the_reason(update: Update, reason: str) -> None:
    with pytest.raises(UpdateRejected, match=reason):
        _strategy().validate(update, capacity=2)


def test_checkpoint_state_round_trips() -> None:
    strategy = _strategy()
    strategy.aggregate([_update([[1.0, 2.0, 1.0], [0.0, 1.0, 1.0]])], measure=False)
    other = _strategy()
    other.load_state_dict(strategy.state_dict())
    torch.testing.assert_close(other.model.topic_word, strategy.model.topic_word)
    assert other.iterations == strategy.iterations == 1  # a resumed run counts on from where it was


class Tables(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input = nn.Parameter(torch.randn(6, 3, generator=torch.Generator().manual_seed(0)))
        self.output = nn.Parameter(torch.randn(6, 3, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("name", ["sgd", "adagrad", "sparse_adam"])
def test_sparse_rows_step_only_the_touched_rows_as_torchs_optimizer_would(name: str) -> None:
    """Plain SGD is applied as one addition on the rows; Adagrad and SparseAdam through torch's
    sparse-aware step. Each equals torch's optimizer on the mean gradient, row for row."""
    from fedtopic_pipelines.core.config import OptimizerConfig
    from fedtopic_pipelines.core.federated.strategies import SparseRowsSGD, make_optimizer

    config = OptimizerConfig(name=name, lr=0.3)
    model, expected, untouched_reference = Tables(), Tables(), Tables()
    strategy = SparseRowsSGD(model, config, reduction="sum")
    g = torch.Generator().manual_seed(2)
    a = {"input": torch.randn(2, 3, generator=g)}
    b = {"input": torch.randn(1, 3, generator=g)}
    updates = [
        Update("a", UpdateKind.SPARSE_ROWS, a, 3, row_indices={"input": torch.tensor([1, 4])}),
        Update("b", UpdateKind.SPARSE_ROWS, b, 1, row_indices={"input": torch.tensor([4])}),
    ]
    dense = torch.zeros(6, 3)  # the pair-weighted mean (3 and 1 of 4 pairs) times the round's 4 pairs
    dense[[1, 4]] += a["input"] * 3
    dense[[4]] += b["input"] * 1
    optimizer = make_optimizer([expected.input], config, sparse=True)
    for _ in range(2):  # two rounds: Adagrad and Adam carry state from the first
        strategy.aggregate(updates, measure=False)
        optimizer.zero_grad()
        expected.input.grad = dense.to_sparse()
        optimizer.step()
    assert torch.allclose(model.input, expected.input, atol=1e-6)
    assert not torch.equal(model.input, untouched_reference.input)
    untouched = [0, 2, 3, 5]
    assert torch.equal(model.input.detach()[untouched], untouched_reference.input.detach()[untouched])
    assert torch.equal(model.output, untouched_reference.output)  # no client sent it: never stepped
