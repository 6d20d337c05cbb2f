"""Server-side strategies: they own the global model and turn accepted updates into its next state.

A strategy decides what the server broadcasts, how an update of its kind is validated,
which reducer aggregates the accepted updates, and what convergence measure (if any)
the stopping rule may read. The server around it is the same for every family.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from fedtopic_pipelines.core.config import AggregationConfig, ConfigError, OptimizerConfig
from fedtopic_pipelines.core.federated.aggregation import (
    TensorSpec,
    UpdateRejected,
    sparse_row_mean,
    total,
    validate_update,
    weighted_mean,
)
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federated.pooled import (
    PHASE_KEY,
    SOLO,
    TOTAL_KEY,
    backward_group,
    forward_group,
    grad_names,
    sum_names,
)
from fedtopic_pipelines.core.rows import add_rows


class Strategy(Protocol):
    """What :class:`~fedtopic_pipelines.core.federated.server.FederatedServer` needs."""

    kind: UpdateKind
    convergence_metric: str | None  # the name aggregate() gives its convergence measure, if it has one

    def instruction(self, round_: int) -> Instruction: ...

    def parameters(self) -> dict[str, torch.Tensor]: ...

    def evaluation_instruction(self, round_: int) -> Instruction: ...

    def validate(self, update: Update, capacity: int | None) -> None: ...

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]: ...

    def snapshot(self) -> dict[str, torch.Tensor]: ...

    def restore(self, state: dict[str, torch.Tensor]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def make_optimizer(params, config: OptimizerConfig, sparse: bool = False) -> torch.optim.Optimizer:
    """The server optimizer of eq. 3 (plain SGD), Adam as in the CTM defaults, or Adagrad;
    with ``sparse`` (row-indexed gradients), torch's sparse-aware ones: SGD and Adagrad
    update only the rows a round touched, ``sparse_adam`` is torch's lazy SparseAdam."""
    if config.name == "sparse_adam":
        if not sparse:
            raise ConfigError(
                "parameter 'train.optimizer.name' is 'sparse_adam', which only the sparse-row family (word2vec) "
                "can use; choose adam, sgd or adagrad"
            )
        return torch.optim.SparseAdam(params, lr=config.lr, betas=config.betas)
    if config.name == "adam":
        if sparse:
            raise ConfigError(
                "parameter 'train.optimizer.name' is 'adam', which cannot step sparse rows; choose sgd, adagrad "
                "or sparse_adam"
            )
        # fused: one kernel per parameter instead of about ten tensor ops each; for ProdLDA's
        # parameters at 1 CPU thread 0.6 ms per step instead of 1.9 (torch has it on CPU and CUDA)
        return torch.optim.Adam(params, lr=config.lr, betas=config.betas, fused=True)
    if config.name == "adagrad":
        return torch.optim.Adagrad(params, lr=config.lr)
    return torch.optim.SGD(params, lr=config.lr)


def is_variance(name: str) -> bool:
    """Whether batch statistic ``name`` is a variance (``<layer>.var``), which must be > 0."""
    return name.endswith(".var")


class BatchStatistics:
    """Batch statistics that clients send beside their gradients (BatchNorm means and variances).

    The model declares them (``statistics_shapes``) and folds their weighted mean into its
    running estimates (``apply_statistics``). A variance of 0 or below, or a value beyond
    the limits, is rejected: one client's ``1e30`` mean or zero variance would otherwise
    enter the running estimates that evaluation normalises with, and the model would give
    every document the same topic mix while the training loss looks normal. The limits
    are far beyond what a real batch produces (docs/architecture.md says how they were chosen).
    """

    MEAN_LIMIT = 1e6
    VARIANCE_LIMIT = 1e12

    def __init__(self, model: nn.Module, pooled: bool = False) -> None:
        self.model = model
        self.pooled = pooled  # a one-party pooled step's statistics (its pooled layers'), not per-organisation ones
        dtype = next(model.parameters()).dtype
        self.specs = {name: TensorSpec(tuple(shape), dtype) for name, shape in model.statistics_shapes(pooled).items()}

    def check(self, update: Update) -> None:
        for name, value in update.statistics.items():
            if is_variance(name):
                if bool((value <= 0).any()):
                    raise UpdateRejected(update.client_id, f"statistic '{name}' has a variance <= 0")
                if bool((value > self.VARIANCE_LIMIT).any()):
                    raise UpdateRejected(update.client_id, f"statistic '{name}' exceeds {self.VARIANCE_LIMIT:g}")
            elif bool((value.abs() > self.MEAN_LIMIT).any()):
                raise UpdateRejected(update.client_id, f"statistic '{name}' exceeds {self.MEAN_LIMIT:g} in magnitude")

    def apply(self, statistics: dict[str, torch.Tensor]) -> None:
        device = next(self.model.parameters()).device  # updates decoded from Flower records are on the CPU
        self.model.apply_statistics({k: v.to(device) for k, v in statistics.items()}, pooled=self.pooled)


def _norm(tensors: Mapping[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(torch.linalg.vector_norm(t)) ** 2 for t in tensors.values()))


class FedSGD:
    """Synchronous per-mini-batch gradient averaging (gFedNTM eq. 1-3, Algorithm 1).

    The server averages the clients' gradients of the shared parameters weighted by
    mini-batch size (eq. 2) and takes one optimizer step per round (eq. 3, Adam by default);
    with :class:`BatchStatistics` it also averages the clients' batch statistics with the
    same weights into the model's running estimates. Its convergence measure, computed only
    when the stopping rule asks for it, is the relative change of the shared parameters.
    """

    kind = UpdateKind.GRADIENTS
    convergence_metric = "relative_change"
    # privacy (core/privacy/defences.py): set by the federation when ``privacy`` asks for DP or a
    # robust rule; None is the weighted mean. ``round`` is the round last instructed, which the
    # next aggregate() closes (server noise is seeded by it).
    reducer: Any = None
    round: int = 0

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerConfig,
        statistics: BatchStatistics | None = None,
        shared: Sequence[str] | None = None,
        metric_names: Sequence[str] | None = None,
    ) -> None:
        self.model = model
        self.metric_names = None if metric_names is None else frozenset(metric_names)
        self.params = {n: p for n, p in model.named_parameters() if shared is None or n in shared}
        self.optimizer = make_optimizer(list(self.params.values()), optimizer)
        self.statistics = statistics
        self._specs = {name: TensorSpec.of(p) for name, p in self.params.items()}

    def parameters(self) -> dict[str, torch.Tensor]:
        """The shared parameters: what is broadcast and what the gradients are of."""
        return {name: p.detach() for name, p in self.params.items()}

    def relative_change(self, before: Mapping[str, torch.Tensor]) -> float:
        """||after - before|| / ||before|| over the shared parameters (the convergence measure)."""
        after = self.parameters()
        return _norm({k: after[k] - before[k] for k in before}) / max(_norm(before), 1e-12)

    def instruction(self, round_: int) -> Instruction:
        self.round = round_
        return Instruction(round_, self.parameters(), {"action": self.kind.value})

    def reduce(
        self, updates: list[Update], reference: Mapping[str, torch.Tensor] | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The round's aggregate of the accepted updates: the weighted mean (eq. 2), or what
        ``privacy`` asks for (``reducer``), with what it records."""
        if self.reducer is None:
            return weighted_mean([u.tensors for u in updates], [u.num_examples for u in updates]), {}
        return self.reducer(updates, reference, self.round)

    def evaluation_instruction(self, round_: int) -> Instruction:
        """Ask clients to validate the global model: its shared weights *and* running statistics
        (not the server's copies of the organisations' local parameters, which are theirs)."""
        local = {name for name, _ in self.model.named_parameters()} - set(self.params)
        state = {k: v for k, v in self.snapshot().items() if k not in local}
        return Instruction(round_, state, {"action": EVALUATE})

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the global model's full state (for keeping the best weights)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        """Model and server optimizer state (Adam moments included), for checkpoints."""
        return {"model": self.snapshot(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def validate(self, update: Update, capacity: int | None) -> None:
        statistics = None if self.statistics is None else self.statistics.specs
        validate_update(update, self.kind, self._specs, statistics, capacity, self.metric_names)
        if self.statistics is not None:
            self.statistics.check(update)

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]:
        weights = [u.num_examples for u in updates]
        grads, recorded = self.reduce(updates)
        before = {k: p.detach().clone() for k, p in self.params.items()} if measure else None
        self.optimizer.zero_grad(set_to_none=True)
        for name, param in self.params.items():
            param.grad = grads[name].to(param.device)
        self.optimizer.step()
        if self.statistics is not None:
            self.statistics.apply(weighted_mean([u.statistics for u in updates], weights))
        if before is None:
            return recorded
        return {**recorded, self.convergence_metric: self.relative_change(before)}


@runtime_checkable
class Exchanging(Protocol):
    """A strategy whose round first runs exchanges of its own (pooled BatchNorm's sums and their
    derivatives) with the organisations that answer them all, then its training instruction."""

    def exchanges(self, round_: int, parties: int | None) -> Generator[Instruction, list[Update], None]:
        """Yields each exchange's instruction and receives its accepted updates (``parties``: how
        many organisations are asked, when the server knows)."""
        ...

    def validate_exchange(self, update: Update, capacity: int | None, instruction: Instruction) -> None: ...


class PooledFedSGD(FedSGD):
    """FedSGD whose BatchNorm layers normalise each step's batch of every organisation together
    (``pooled_batch``): before the gradient, 2G exchanges of sums and of derivatives
    (core/federated/pooled.py). The weighted mean of the gradients is then the gradient of the
    pooled batch's mean loss, and the running statistics take the pooled batch's mean and
    variance, as a centralized step on the same documents would (docs/batchnorm.md, section 8).

    A sum is checked as BatchNorm statistics are (:class:`BatchStatistics`), per document: a
    mean beyond ``MEAN_LIMIT``, a mean square beyond ``VARIANCE_LIMIT`` or a sum of squares
    below what the sum implies (a negative variance) is rejected, as is a count that differs
    from the organisation's first exchange of the step.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerConfig,
        shared: Sequence[str] | None = None,
        metric_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__(model, optimizer, None, shared=shared, metric_names=metric_names)
        self.groups: list[list[str]] = model.pooled_groups()
        self.sizes = {layer: tuple(getattr(model, layer).running_mean.shape) for g in self.groups for layer in g}
        self._context: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}  # each organisation's documents in this step (its first exchange)
        self._solo = False
        self.solo_statistics = BatchStatistics(model, pooled=True)

    def exchanges(self, round_: int, parties: int | None) -> Generator[Instruction, list[Update], None]:
        self.round = round_
        params = self.parameters()
        context: dict[str, torch.Tensor] = {}
        n_groups = len(self.groups)
        self._counts = {}
        self._solo = parties == 1
        if self._solo:  # one party holds the step whole: nothing to exchange (pooled.SOLO)
            self._context = {}
            return
        for phase in range(2 * n_groups):
            config = {"action": UpdateKind.POOLED_NORM.value, PHASE_KEY: phase, TOTAL_KEY: self._total}
            updates = yield Instruction(round_, {**params, **context}, config)
            if phase == 0:
                self._counts = {u.client_id: u.num_examples for u in updates}
            if forward_group(phase, n_groups) is not None:
                context.update(total([u.tensors for u in updates]))
            else:
                context.update(weighted_mean([u.tensors for u in updates], [u.num_examples for u in updates]))
        self._context = context

    @property
    def _total(self) -> float:
        """N, the step's documents over all organisations (0 before the first exchange)."""
        return float(sum(self._counts.values()))

    def instruction(self, round_: int) -> Instruction:
        self.round = round_
        phase = SOLO if self._solo else 2 * len(self.groups)
        config = {"action": self.kind.value, PHASE_KEY: phase, TOTAL_KEY: self._total}
        return Instruction(round_, {**self.parameters(), **self._context}, config)

    def _exchange_specs(self, phase: int) -> dict[str, TensorSpec]:
        n_groups = len(self.groups)
        group = forward_group(phase, n_groups)
        names = sum_names if group is not None else grad_names
        group = group if group is not None else backward_group(phase, n_groups)
        if group is None:
            raise ValueError(f"no pooled exchange {phase} in a step of {2 * n_groups}")
        return {
            name: TensorSpec(self.sizes[layer], torch.float64) for layer in self.groups[group] for name in names(layer)
        }

    def validate_exchange(self, update: Update, capacity: int | None, instruction: Instruction) -> None:
        phase = int(instruction.config[PHASE_KEY])
        validate_update(update, UpdateKind.POOLED_NORM, self._exchange_specs(phase), None, capacity, set())
        if phase > 0 and update.num_examples != self._counts.get(update.client_id):
            raise UpdateRejected(
                update.client_id,
                f"it counts {update.num_examples} documents, {self._counts.get(update.client_id)} in the step's first "
                "exchange",
            )
        group = forward_group(phase, len(self.groups))
        if group is None:
            return
        n, limits = update.num_examples, BatchStatistics
        for layer in self.groups[group]:
            s1, s2 = (update.tensors[name] for name in sum_names(layer))
            if bool((s1.abs() > limits.MEAN_LIMIT * n).any()):
                raise UpdateRejected(update.client_id, f"a sum of '{layer}' exceeds {limits.MEAN_LIMIT:g} per document")
            if bool((s2 > limits.VARIANCE_LIMIT * n).any()):
                raise UpdateRejected(
                    update.client_id, f"a sum of squares of '{layer}' exceeds {limits.VARIANCE_LIMIT:g} per document"
                )
            if bool((s2 < s1 * s1 / n * (1 - 1e-9) - 1e-12).any()):
                raise UpdateRejected(update.client_id, f"the sums of '{layer}' imply a negative variance")

    def validate(self, update: Update, capacity: int | None) -> None:
        if self._solo:  # its whole batch's statistics beside the gradient, checked as batch's are
            validate_update(update, self.kind, self._specs, self.solo_statistics.specs, capacity, self.metric_names)
            self.solo_statistics.check(update)
            return
        super().validate(update, capacity)
        if update.num_examples != self._counts.get(update.client_id):
            raise UpdateRejected(
                update.client_id,
                f"its gradient counts {update.num_examples} documents, {self._counts.get(update.client_id)} in the "
                "step's exchanges",
            )

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]:
        recorded = super().aggregate(updates, measure)
        if self._solo:
            weights = [u.num_examples for u in updates]
            self.solo_statistics.apply(weighted_mean([u.statistics for u in updates], weights))
            return recorded
        sums = {
            layer: tuple(self._context[name] for name in sum_names(layer)) for group in self.groups for layer in group
        }
        self.model.apply_pooled_statistics(sums, self._total)
        return recorded


class SparseRowsSGD(FedSGD):
    """FedSGD on row-indexed gradients (Word2Vec; seed 003 Algorithm 3 and sec. 4.5.1).

    Each client sends the gradient of its batch's mean loss on the rows it touched, with
    their indices; the server takes the pair-count-weighted mean (a row a client did not
    send counts as zero for it: :func:`sparse_row_mean`), scales it by the round's pairs
    when ``reduction`` is ``sum``, and steps only those rows with a sparse-aware optimizer.
    Every round reports the bytes its accepted updates carried, what dense gradients of
    the same tensors would have carried, and their ratio (thesis Fig. 4.12). Validation
    (``validate_update`` checks the sparse rows), broadcast, snapshots and checkpoints are FedSGD's.
    """

    kind = UpdateKind.SPARSE_ROWS
    convergence_metric = None

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerConfig,
        reduction: str = "sum",
        metric_names: Sequence[str] | None = None,
    ) -> None:
        self.model = model
        self.statistics = None
        self.reduction = reduction
        self.metric_names = None if metric_names is None else frozenset(metric_names)
        self.params = dict(model.named_parameters())
        self.optimizer = make_optimizer(list(self.params.values()), optimizer, sparse=True)
        self._specs = {name: TensorSpec.of(p) for name, p in self.params.items()}
        self.dense_bytes = sum(p.numel() * p.element_size() for p in self.params.values())

    def evaluation_instruction(self, round_: int) -> Instruction:
        # the tables themselves, not a copy: clients only read them (a copy is 2 V x D floats)
        return Instruction(round_, self.parameters(), {"action": EVALUATE})

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]:
        weights = [u.num_examples for u in updates]
        total_weight = float(sum(weights))
        scale = total_weight if self.reduction == "sum" else 1.0
        rate = self._plain_sgd_rate()
        if rate is not None:
            # plain SGD: param[rows] -= lr scale (n_c / n) g_c for each client c, one compiled loop
            # per update and no mean materialised (torch's sparse SGD took 0.7 ms a tensor a round)
            for update, weight in zip(updates, weights, strict=True):
                for name, value in update.tensors.items():
                    table = self.params[name].detach().numpy()
                    index = update.row_indices[name].numpy()
                    add_rows(table, index, value.reshape(len(index), -1).numpy(), -rate * scale * weight / total_weight)
        else:
            rows = sparse_row_mean(updates, weights)
            self.optimizer.zero_grad(set_to_none=True)
            for name, param in self.params.items():
                if name not in rows:
                    continue
                index, mean = rows[name]
                values = (mean * scale if scale != 1.0 else mean).to(param.device)
                param.grad = torch.sparse_coo_tensor(
                    index.to(param.device)[None], values, tuple(param.shape), is_coalesced=True, check_invariants=False
                )
            self.optimizer.step()
        sent = sum(u.nbytes for u in updates)
        dense = self.dense_bytes * len(updates)
        return {"bytes_sent": float(sent), "bytes_dense": float(dense), "bytes_ratio": dense / max(sent, 1)}

    def _plain_sgd_rate(self) -> float | None:
        """The learning rate when the optimizer is plain SGD on CPU tables (its step is then one
        scaled addition on the rows), else None."""
        if type(self.optimizer) is not torch.optim.SGD or any(p.device.type != "cpu" for p in self.params.values()):
            return None
        return float(self.optimizer.param_groups[0]["lr"])


# Flower 1.42's defaults for its FedOpt strategies (flwr.serverapp.strategy): eta and beta_1.
FEDOPT_DEFAULTS = {"fedadagrad": (0.1, 0.0), "fedyogi": (0.01, 0.9), "fedadam": (0.1, 0.9)}


class FedOpt(FedSGD):
    """Weights rules (Reddi et al. 2021; seed 004 Algorithm 1, lines 9-10): each sampled
    organisation sends its shared weights after its local epochs; the server averages them
    weighted by document count (``fedavg``), or treats the average minus the current weights
    as a pseudo-gradient Delta and takes one adaptive step on it:

        m = beta_1 m + (1 - beta_1) Delta
        v = v + Delta^2                                         (FedAdagrad)
        v = v - (1 - beta_2) Delta^2 sign(v - Delta^2)          (FedYogi)
        v = beta_2 v + (1 - beta_2) Delta^2                     (FedAdam)
        x = x + eta m / (sqrt(v) + tau)

    with m and v starting at zero, as Flower 1.42's ``FedAdagrad`` / ``FedYogi`` / ``FedAdam``
    compute it (tested against them to 1e-6): FedAdagrad without momentum, and FedAdam with
    Flower's bias correction, eta sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)) at the t-th
    aggregation. ``project`` (NMF: W >= 0) is applied to the new weights; ``check`` adds a
    family's own test of an update (NMF: non-negative weights) to the engine's validation.
    """

    kind = UpdateKind.WEIGHTS
    convergence_metric = "relative_change"

    def __init__(
        self,
        model: nn.Module,
        aggregation: AggregationConfig,
        rule: str,
        shared: Sequence[str] | None = None,
        metric_names: Sequence[str] | None = None,
        project: Any = None,
        check: Any = None,
    ) -> None:
        if rule not in ("fedavg", *FEDOPT_DEFAULTS):
            raise ConfigError(f"parameter 'train.aggregation.rule' is {rule!r}, not a weights rule")
        self.model = model
        self.rule = rule
        self.statistics = None
        self.metric_names = None if metric_names is None else frozenset(metric_names)
        self.params = {n: p for n, p in model.named_parameters() if shared is None or n in shared}
        self._specs = {name: TensorSpec.of(p) for name, p in self.params.items()}
        eta, beta_1 = FEDOPT_DEFAULTS.get(rule, (1.0, 0.0))
        self.eta = aggregation.eta if aggregation.eta is not None else eta
        self.beta_1 = (
            0.0 if rule == "fedadagrad" else (aggregation.beta_1 if aggregation.beta_1 is not None else beta_1)
        )
        if rule == "fedadagrad" and aggregation.beta_1:
            raise ConfigError(
                "parameter 'train.aggregation.beta_1' is set, but FedAdagrad has no momentum (as Flower's): "
                "leave it null"
            )
        self.beta_2 = aggregation.beta_2
        self.tau = aggregation.tau
        self.project = project
        self.check = check
        self.steps = 0
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def validate(self, update: Update, capacity: int | None) -> None:
        validate_update(update, self.kind, self._specs, None, capacity, self.metric_names)
        if self.check is not None:
            self.check(update)

    def state_dict(self) -> dict[str, Any]:
        """Model, the moments m and v and the step count, for checkpoints."""
        return {
            "model": self.snapshot(),
            "moments": {
                **{f"m.{k}": v.clone() for k, v in self.m.items()},
                **{f"v.{k}": v.clone() for k, v in self.v.items()},
            },
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        moments = state["moments"]
        self.m = {k.removeprefix("m."): v.clone() for k, v in moments.items() if k.startswith("m.")}
        self.v = {k.removeprefix("v."): v.clone() for k, v in moments.items() if k.startswith("v.")}
        self.steps = int(state["steps"])

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]:
        mean, recorded = self.reduce(updates, self.parameters())
        before = {k: p.detach().clone() for k, p in self.params.items()} if measure else None
        self.steps += 1
        with torch.no_grad():
            for name, param in self.params.items():
                average = mean[name].to(param.device)
                if self.rule == "fedavg":
                    param.copy_(average)
                    continue
                delta = average - param
                m = self.m.get(name, torch.zeros_like(param))
                v = self.v.get(name, torch.zeros_like(param))
                m = self.beta_1 * m + (1 - self.beta_1) * delta
                square = delta * delta
                if self.rule == "fedadagrad":
                    v = v + square
                elif self.rule == "fedyogi":
                    v = v - (1 - self.beta_2) * square * torch.sign(v - square)
                else:
                    v = self.beta_2 * v + (1 - self.beta_2) * square
                eta = self.eta
                if self.rule == "fedadam":  # Flower 1.42's bias correction, at its round number t = steps
                    t = self.steps + 1.0
                    eta = self.eta * math.sqrt(1 - self.beta_2**t) / (1 - self.beta_1**t)
                param.add_(eta * m / (v.sqrt() + self.tau))
                self.m[name], self.v[name] = m, v
            if self.project is not None:
                self.project(self.params)
        if before is None:
            return recorded
        return {**recorded, self.convergence_metric: self.relative_change(before)}


class SummedStatistics(FedSGD):
    """Federated EM (PC-TD, seed 002 Algorithm 1, lines 10-13): every party sends its
    sufficient statistics of the shared parameters (M_t, eq. 10), the server sums them
    (:func:`total`: statistics add, they are not averaged) and ``combine(params, sums,
    iteration)`` turns the sums into the new shared parameters in place (PC-TD: eq. 11's
    normalisation with clipping, then eq. 13), returning what it wants recorded (entries
    clipped, topics emptied, the privacy spent after ``iteration`` iterations, counted from 1
    and kept across a resumed run). Validation (names, shapes, finite values, the document
    count) is the engine's; ``check`` adds a family's own. ``specs``: the statistics' names,
    shapes and dtypes where they are not the shared parameters' (FedNMF exact sends W^T W and
    X^T W for H). Its convergence measure is the relative change of the parameters, or, with
    ``convergence_metric``, the measure of that name that ``combine`` records itself.
    """

    kind = UpdateKind.STATISTICS
    convergence_metric = "relative_change"

    def __init__(
        self,
        model: nn.Module,
        combine: Any,
        shared: Sequence[str] | None = None,
        metric_names: Sequence[str] | None = None,
        check: Any = None,
        specs: Mapping[str, TensorSpec] | None = None,
        convergence_metric: str | None = None,
    ) -> None:
        self.model = model
        self.combine = combine
        self.check = check
        self.statistics = None
        self.iterations = 0
        self.metric_names = None if metric_names is None else frozenset(metric_names)
        self.params = {n: p for n, p in model.named_parameters() if shared is None or n in shared}
        self._specs = dict(specs) if specs is not None else {name: TensorSpec.of(p) for name, p in self.params.items()}
        if convergence_metric is not None:
            self.convergence_metric = convergence_metric

    def validate(self, update: Update, capacity: int | None) -> None:
        validate_update(update, self.kind, self._specs, None, capacity, self.metric_names)
        if self.check is not None:
            self.check(update)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.snapshot(), "iterations": self.iterations}  # EM keeps nothing more

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.iterations = int(state["iterations"])

    def aggregate(self, updates: list[Update], measure: bool) -> dict[str, float]:
        sums = total([u.tensors for u in updates])
        own = self.convergence_metric != SummedStatistics.convergence_metric  # combine records its own measure
        before = {k: p.detach().clone() for k, p in self.params.items()} if measure and not own else None
        self.iterations += 1
        with torch.no_grad():
            recorded = dict(self.combine(self.params, sums, self.iterations))
        if before is not None:
            recorded[self.convergence_metric] = self.relative_change(before)
        return recorded
