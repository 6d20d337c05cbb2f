import pytest
import torch

from fedtopic_pipelines.core.federated.aggregation import UpdateRejected, validate_update, weighted_mean
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind

SHAPES = {"w": torch.Size([2, 2])}


def _update(tensor: torch.Tensor, n: int = 3, name: str = "w", kind: UpdateKind = UpdateKind.GRADIENTS) -> Update:
    return Update("org", kind, {name: tensor}, n)


def test_weighted_by_batch_size_eq2() -> None:
    out = weighted_mean([{"w": torch.tensor(1.0)}, {"w": torch.tensor(4.0)}], [1, 3])
    assert out["w"].item() == pytest.approx((1 * 1 + 3 * 4) / 4)


def test_valid_update_passes() -> None:
    validate_update(_update(torch.zeros(2, 2)), UpdateKind.GRADIENTS, SHAPES)


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (_update(torch.tensor([[float("nan"), 0], [0, 0]])), "NaN or Inf"),
        (_update(torch.tensor([[float("inf"), 0], [0, 0]])), "NaN or Inf"),
        (_update(torch.zeros(3, 2)), "shape"),
        (_update(torch.zeros(2, 2), name="v"), "names differ"),
        (_update(torch.zeros(2, 2), n=0), "positive integer"),
        (_update(torch.zeros(2, 2), kind=UpdateKind.WEIGHTS), "expects 'gradients'"),
    ],
)
def test_untrusted_updates_are_rejected_with_a_reason(update: Update, reason: str) -> None:
    with pytest.raises(UpdateRejected, match=reason):
        validate_update(update, UpdateKind.GRADIENTS, SHAPES)
