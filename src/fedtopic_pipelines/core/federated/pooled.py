"""Pooled (synchronised) BatchNorm: the exchanges of one FedSGD step in which every BatchNorm
layer normalises the step's batch of *all* organisations, as one centralized batch would be
(``train.model.normalization: pooled_batch``; docs/batchnorm.md, section 8).

A pooled layer needs, before a document can pass it, the sum S1 and the sum of squares S2 of
its input over every organisation's documents of the step; the gradient then needs, for each
such layer, the derivative of the pooled loss with respect to S1 and S2. With the layers in
G groups in forward order (ProdLDA: the encoder's mu and sigma, then the decoder), a step is

* G forward exchanges: each organisation sends its own S1, S2 of group g, given the pooled
  sums of the groups before it; the server adds them up;
* G backward exchanges, last group first: each organisation sends the derivative of its mean
  loss, plus N / n times the later groups' pooled derivatives dotted with its own sums, with
  respect to group g's pooled sums; the server takes their document-weighted mean;
* the gradient exchange of FedSGD, whose surrogate adds every group's pooled derivative dotted
  with the organisation's own sums, so that the weighted mean of the gradients is the gradient
  of the pooled batch's mean loss: exact, as a centralized step on the same documents.

A step that one party holds whole (a trusted server's pooled corpus, an organisation training
alone, or the one organisation left in a round) needs no exchange: its gradient instruction
says ``SOLO`` and it normalises all its batches of the step as one, with the statistics
beside its gradient as ``batch`` sends them.

This module names the exchanges and the tensors they carry; the family computes them
(the ``PooledNorm`` protocol in ``family.py``), the strategy orchestrates them (``PooledFedSGD``).
"""

from __future__ import annotations

PHASE_KEY = "pooled_phase"  # Instruction.config: which exchange of the step (the gradient's is 2G)
SOLO = -1  # PHASE_KEY of a step one party holds whole: no exchange, its batches are one BatchNorm batch
TOTAL_KEY = "pooled_total"  # Instruction.config: N, the step's documents over all organisations
PREFIX = "pooled."


def sum_names(layer: str) -> tuple[str, str]:
    """The names of a layer's pooled sum and sum of squares in a message."""
    return f"{PREFIX}{layer}.s1", f"{PREFIX}{layer}.s2"


def grad_names(layer: str) -> tuple[str, str]:
    """The names of the pooled loss's derivatives with respect to them."""
    return f"{PREFIX}{layer}.g1", f"{PREFIX}{layer}.g2"


def is_sum(name: str) -> bool:
    """Whether a message's tensor is a pooled sum (a forward exchange's), not a derivative."""
    return name.startswith(PREFIX) and name.endswith((".s1", ".s2"))


def forward_group(phase: int, groups: int) -> int | None:
    """The group whose sums exchange ``phase`` collects, or None if it is not a forward one."""
    return phase if 0 <= phase < groups else None


def backward_group(phase: int, groups: int) -> int | None:
    """The group whose derivatives exchange ``phase`` collects (last group first), or None."""
    return 2 * groups - 1 - phase if groups <= phase < 2 * groups else None
