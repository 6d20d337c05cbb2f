"""The client: one organisation's private data and model, answering the server.

A client never sends documents: only what its ``handle`` returns, an :class:`Update` of its
family's kind. It is the same object on both engines; on Flower it may be rebuilt for
every message, so its whole position (the batch and noise streams, the next round it
expects) is a state dict of tensors that the ClientApp keeps between messages.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import torch
from torch import nn

from fedtopic_pipelines.core.federated.family import BatchStream, ModelFamily, PooledNorm, PrivateSteps
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federated.pooled import PHASE_KEY, TOTAL_KEY
from fedtopic_pipelines.core.privacy.defences import DP_LEVEL_KEY, NOISE_KEYS, noise_generator, privatize

logger = logging.getLogger(__name__)

# the instructions a client answers with a round of local computation (:class:`LocalEpochs`)
LOCAL_ROUND_KINDS = (UpdateKind.WEIGHTS.value, UpdateKind.STATISTICS.value)


class Client(Protocol):
    """Anything that answers an instruction with an update (in-process or behind Flower)."""

    client_id: str

    def handle(self, instruction: Instruction) -> Update: ...


class FamilyClient:
    """A client of any family: loads the broadcast shared parameters, runs the family's local
    step on its own stream and returns it as an update (gFedNTM Algorithm 1, GETCLIENTGRAD,
    for ProdLDA). Local parameters (those the family does not share) never leave it.

    With one organisation's stream this is an organisation; with a stream of ghost batches
    over the pooled corpus it is the centralized trainer.
    """

    def __init__(
        self,
        client_id: str,
        family: ModelFamily,
        model: nn.Module,
        stream: BatchStream,
        validation: Any = None,
        validation_seed: int = 0,
        local_states: Any = None,
    ) -> None:
        self.client_id = self.name = client_id  # ``name``: a client can also be an engine's endpoint
        self.local_states = local_states  # a LocalStates: its local parameters while the server checkpoints
        self.family = family
        self.model = model
        self.stream = stream
        self.validation = validation
        self.validation_seed = validation_seed
        self.shared = family.shared_names(model)
        # the model's parameters by name, once: a module's parameters are fixed once it is built
        # (a broadcast replaces their data, not them)
        self.params = dict(model.named_parameters())
        self.local = [name for name in self.params if name not in set(self.shared)]
        self.next_round = 0

    def handle(self, instruction: Instruction) -> Update:
        if instruction.config.get("action") == EVALUATE:
            return self.evaluate(instruction)
        action = instruction.config.get("action")
        local_round = action in LOCAL_ROUND_KINDS
        sample_dp = instruction.config.get(DP_LEVEL_KEY) == "sample"
        if sample_dp and (local_round or not isinstance(self.family, PrivateSteps)):
            raise ValueError(
                f"client '{self.client_id}': sample-level DP (DP-SGD) is built for one gradient step per round of "
                f"a family with per-document gradients, not for '{action}' of {self.family.name}"
            )
        if PHASE_KEY in instruction.config:  # an exchange of a pooled-BatchNorm step, or its gradient
            step = self.pooled_step(instruction)
            if action == UpdateKind.POOLED_NORM.value:  # not the step's last: the client stays at this round
                return Update(
                    self.client_id, UpdateKind.POOLED_NORM, step.tensors, step.num_examples, round=instruction.round
                )
        elif local_round:  # weights after local epochs, or a family's statistics over all its documents
            self.rejoin(instruction)
            self.load_shared(instruction.state)
            step = self.stream.run(self.model, instruction.round)  # a LocalEpochs: the round's local computation
            self.keep_local(instruction)
        else:  # one gradient at the broadcast weights: the step only reads them
            self.catch_up(instruction.round)
            self.load_shared(instruction.state, in_place=True)
            step = self.private_step(instruction) if sample_dp else self.family.local_step(self.model, self.stream)
        self.next_round = instruction.round + 1
        tensors, losses = step.tensors, step.losses
        if NOISE_KEYS[1] in instruction.config and not sample_dp:  # client-level DP: clipped, noised, no loss
            tensors, losses = self.privatize(instruction, tensors, local_round), {}
        return Update(
            self.client_id,
            UpdateKind(action) if local_round else self.family.update_kind,
            tensors,
            step.num_examples,
            row_indices=step.row_indices,
            statistics=step.statistics,
            metrics=losses,
            round=instruction.round,
        )

    def pooled_step(self, instruction: Instruction) -> Any:
        """One exchange of a pooled-BatchNorm step (core/federated/pooled.py) at the instruction's round."""
        if not isinstance(self.family, PooledNorm):
            raise ValueError(f"client '{self.client_id}': {self.family.name} has no pooled BatchNorm")
        self.catch_up(instruction.round)
        self.load_shared(instruction.state, in_place=True)  # sums and gradients at the broadcast weights
        config = instruction.config
        return self.family.pooled_step(
            self.model, self.stream, instruction.state, int(config[PHASE_KEY]), float(config[TOTAL_KEY])
        )

    def privatize(self, instruction: Instruction, tensors: dict[str, torch.Tensor], weights: bool) -> dict:
        """The update clipped to ``dp_clip`` (weights: their difference from the broadcast ones)
        plus this organisation's share of the noise, drawn from its own seeded stream for the
        round. The loss terms stay here: they are computed from the documents without noise,
        outside what the accountant bounds (docs/privacy.md)."""
        bound, std, generator = self._noise(instruction)
        reference = {k: instruction.state[k] for k in tensors} if weights else None
        return privatize(tensors, reference, bound, std, generator)

    def private_step(self, instruction: Instruction) -> Any:
        """Sample-level DP-SGD's step: each document's gradient clipped to ``dp_clip``, noise of std
        ``dp_std`` on their sum from this organisation's seeded stream for the round (the batch's
        own dropout and reparameterisation draws are untouched, so a replay stays exact)."""
        bound, std, generator = self._noise(instruction)
        return self.family.private_step(self.model, self.stream, bound, std, generator)

    def _noise(self, instruction: Instruction) -> tuple[float, float, torch.Generator]:
        """The instruction's DP clip and noise std, and this organisation's noise stream for the round."""
        bound, std, seed = (instruction.config[k] for k in NOISE_KEYS)
        return float(bound), float(std), noise_generator(int(seed), self.client_id, instruction.round)

    def load_shared(self, state: dict[str, torch.Tensor], in_place: bool = False) -> None:
        """Copy the broadcast shared parameters into the local model; a gradient step
        (``in_place``) or a family whose local step only reads them (``reads_broadcast``:
        Word2Vec, FedNMF exact) takes them as they are, without a copy (in one process a copy
        of every shared tensor per client and round: 7 % of a 32-document ProdLDA step)."""
        params = self.params
        with torch.no_grad():
            for name in self.shared:
                if in_place or self.family.capabilities.reads_broadcast:
                    params[name].data = state[name]
                else:
                    params[name].copy_(state[name])

    def catch_up(self, round_: int) -> None:
        """Rejoin at ``round_``: a client rebuilt from scratch (a resumed run, a restarted node)
        replays its streams to where an uninterrupted client would be. The draws depend on
        the batch shapes only, so a replay reproduces them exactly."""
        self._not_back(round_)
        if round_ > self.next_round:
            self.family.replay(self.model, self.stream, round_ - self.next_round)
            self.next_round = round_

    def _not_back(self, round_: int) -> None:
        if round_ < self.next_round:
            raise ValueError(
                f"client '{self.client_id}' is at round {self.next_round} and cannot go back to round {round_}"
            )

    def rejoin(self, instruction: Instruction) -> None:
        """Under a weights rule a round's draws depend on the round only, so an organisation left
        out of rounds (client sampling) has nothing to replay. Its local parameters are another
        matter: a client rebuilt fresh in a resumed run takes them back from its own copies
        (:class:`~fedtopic_pipelines.core.federated.local.LocalStates`), as they were after the
        last round before this one it trained in."""
        self._not_back(instruction.round)
        job = instruction.config.get("job")
        if self.next_round > 0 or not self.local or self.local_states is None or not job:
            return
        saved = self.local_states.load_before(str(job), instruction.round)
        if saved is None:
            return  # it has not trained before this round: its initial local parameters are right
        round_, state = saved
        params = self.params
        with torch.no_grad():
            for name in self.local:
                params[name].copy_(state[name])
        logger.info(
            "client '%s' rejoins at round %d with its local state of round %d",
            self.client_id,
            instruction.round,
            round_,
        )

    def keep_local(self, instruction: Instruction) -> None:
        """While the server checkpoints (its instructions name the job), keep this round's local parameters."""
        job = instruction.config.get("job")
        if not self.local or self.local_states is None or not job:
            return
        params = self.params
        checkpointed = int(instruction.config.get("checkpointed", 0))
        self.local_states.save(str(job), instruction.round, {n: params[n] for n in self.local}, checkpointed)

    def evaluate(self, instruction: Instruction) -> Update:
        """The broadcast model's mean validation loss on this organisation's held-out
        documents; only the number and the document count leave."""
        if self.validation is None or self.family.rows(self.validation) == 0:
            return Update(self.client_id, UpdateKind.METRICS, {}, 0, round=instruction.round)
        local = set(self.local)  # this organisation's own parameters stay its own
        state = {k: v for k, v in instruction.state.items() if k not in local}
        missing = set(self.model.state_dict()) - local - set(state)
        if missing:
            raise ValueError(f"the evaluation state lacks {sorted(missing)}")
        if self.family.capabilities.reads_broadcast:
            self.load_shared(state)
        else:
            self.model.load_state_dict(state, strict=False)
        loss, n = self.family.validation_loss(self.model, self.validation, self.validation_seed)
        return Update(
            self.client_id, UpdateKind.METRICS, {}, n, metrics={"validation_loss": loss}, round=instruction.round
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stream's position, the next round and the local parameters, as tensors (Flower
        keeps them between messages; a ClientApp may be rebuilt for every message)."""
        params = self.params
        return {
            **{f"stream.{k}": v for k, v in self.stream.state_dict().items()},
            **{f"local.{name}": params[name].detach().cpu().clone() for name in self.local},
            "next_round": torch.tensor(self.next_round, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.stream.load_state_dict({k.removeprefix("stream."): v for k, v in state.items() if k.startswith("stream.")})
        params = self.params
        with torch.no_grad():
            for name in self.local:
                params[name].copy_(state[f"local.{name}"])
        self.next_round = int(state["next_round"])
