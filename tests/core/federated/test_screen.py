"""The server's screen (``privacy.outlier_factor``, core/federated/privacy.py): what it leaves out, and why."""

from __future__ import annotations

import torch

from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Update, UpdateKind
from fedtopic_pipelines.core.federated.privacy import Screen


class _Weights:
    """A weights strategy's broadcast: what a weights update is compared against."""

    def __init__(self, w: torch.Tensor) -> None:
        self.w = w

    def parameters(self) -> dict[str, torch.Tensor]:
        return {"w": self.w}


def _update(org: str, kind: UpdateKind, tensor: torch.Tensor, n: int = 10, **statistics: torch.Tensor) -> Update:
    return Update(org, kind, {"w": tensor}, n, statistics=dict(statistics), round=0)


def _honest(kind: UpdateKind = UpdateKind.GRADIENTS, **statistics) -> list[Update]:
    gen = torch.Generator().manual_seed(0)
    return [_update(o, kind, torch.rand(6, generator=gen) + 0.5, **statistics) for o in "abcd"]


def test_an_honest_round_is_kept_whole() -> None:
    updates = _honest()
    kept, left_out = Screen(100.0)(updates, None, 0)
    assert kept == updates and left_out == {}


def test_a_1000x_gradient_and_a_billion_examples_are_left_out_by_name() -> None:
    updates = _honest()
    updates[1] = _update("b", UpdateKind.GRADIENTS, updates[1].tensors["w"] * -1000)
    updates[2] = _update("c", UpdateKind.GRADIENTS, updates[2].tensors["w"], n=10**9)
    screen = Screen(100.0)
    kept, left_out = screen(updates, None, 0)
    assert [u.client_id for u in kept] == ["a", "d"]
    assert "norm" in left_out["b"] and "privacy.outlier_factor 100" in left_out["b"]
    assert "example count" in left_out["c"]
    assert screen.left_out == {"b": 1, "c": 1}


def test_a_weights_update_is_judged_by_its_change_from_the_broadcast() -> None:
    broadcast = torch.full((6,), 100.0)
    updates = [_update(o, UpdateKind.WEIGHTS, broadcast + 0.1 * (i + 1)) for i, o in enumerate("abcd")]
    kept, _ = Screen(100.0)(updates, _Weights(broadcast), 0)
    assert len(kept) == 4  # the weights are 100x their change: only the change is compared
    updates[3] = _update("d", UpdateKind.WEIGHTS, broadcast + 1000.0)
    kept, left_out = Screen(100.0)(updates, _Weights(broadcast), 0)
    assert set(left_out) == {"d"}


def test_statistics_per_document_and_their_sign() -> None:
    """A party's sufficient statistics grow with its documents: compared per document; a negated
    or vanishing total (no words) is out too."""
    updates = [
        _update(o, UpdateKind.STATISTICS, torch.full((6,), 3.0 * n), n=n)
        for o, n in zip("abcd", (5, 10, 40, 80), strict=True)
    ]
    assert len(Screen(100.0)(updates, None, 0)[0]) == 4
    updates[0] = _update("a", UpdateKind.STATISTICS, -updates[0].tensors["w"], n=5)
    updates[1] = _update("b", UpdateKind.STATISTICS, updates[1].tensors["w"] * 1000, n=10)
    _, left_out = Screen(100.0)(updates, None, 0)
    assert set(left_out) == {"a", "b"}
    assert "total per document" in left_out["a"] and "per document" in left_out["b"]


def test_batch_statistics_too_large_or_too_small_are_left_out() -> None:
    gen = torch.Generator().manual_seed(1)
    var = {o: torch.rand(5, generator=gen) + 1.0 for o in "abcde"}
    updates = [_update(o, UpdateKind.GRADIENTS, torch.ones(6), **{"bn.var": var[o]}) for o in "abcde"]
    updates[1] = _update("b", UpdateKind.GRADIENTS, torch.ones(6), **{"bn.var": torch.full((5,), 1e11)})
    updates[2] = _update("c", UpdateKind.GRADIENTS, torch.ones(6), **{"bn.var": torch.full((5,), 1e-30)})
    _, left_out = Screen(100.0)(updates, None, 0)
    assert set(left_out) == {"b", "c"} and all("'bn.var'" in r for r in left_out.values())


def test_a_round_of_one_update_is_judged_against_the_last_accepted_ones() -> None:
    """Client sampling: one organisation per round; the median of the values seen before stands in."""
    screen = Screen(100.0)
    for round_, org in enumerate("abc"):
        kept, _ = screen([_update(org, UpdateKind.GRADIENTS, torch.ones(6) * (round_ + 1))], None, round_)
        assert len(kept) == 1
    kept, left_out = screen([_update("d", UpdateKind.GRADIENTS, torch.ones(6) * 5000)], None, 3)
    assert kept == [] and set(left_out) == {"d"}


def test_the_first_two_updates_and_a_secure_sum_pass_unjudged() -> None:
    pair = [_update("a", UpdateKind.GRADIENTS, torch.ones(6)), _update("b", UpdateKind.GRADIENTS, torch.ones(6) * 1e6)]
    assert Screen(100.0)(pair, None, 0)[0] == pair  # a median of two is their mean
    secure = [_update(SECURE_AGGREGATE, UpdateKind.GRADIENTS, torch.ones(6) * 1e6)]
    assert Screen(100.0)(secure, None, 0)[0] == secure
