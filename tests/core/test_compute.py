"""Where the arithmetic runs: a device this machine lacks is named before anything trains."""

import sys

import pytest
import torch

from fedtopic_pipelines.core.compute import missing_device, resolve_device


def test_a_device_torch_cannot_reach_here_is_said_so() -> None:
    assert missing_device("cpu") is None
    beyond = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU, on any machine
    assert missing_device(beyond) is not None and "CUDA device" in missing_device(beyond)
    if torch.cuda.is_available():
        assert missing_device("cuda") is None and resolve_device("cuda").type == "cuda"
    else:
        assert missing_device("cuda") == "torch finds no CUDA device on this machine"
        with pytest.raises(ValueError, match="parameter 'train.device' is 'cuda', but torch finds no CUDA device"):
            resolve_device("cuda")


@pytest.mark.skipif(sys.platform == "darwin", reason="Apple silicon may have an MPS device")
def test_mps_is_missing_off_apple_silicon() -> None:
    assert missing_device("mps") == "torch finds no MPS device (Apple silicon) on this machine"


def test_deterministic_algorithms_are_on_inside_the_block_and_restored_after() -> None:
    import torch

    from fedtopic_pipelines.core.compute import deterministic_algorithms

    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_algorithms():
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
