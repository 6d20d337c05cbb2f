"""Secure aggregation of a training round with Flower 1.42's own SecAgg+ (``privacy.secure_aggregation``).

Nothing here is a protocol of ours: the server runs Flower's ``SecAggPlusWorkflow`` once per
training round and the nodes answer through Flower's ``secaggplus_mod``. This module only
adapts the project's messages to what they expect.

**One round** (``secure_round``): the workflow asks the legacy strategy
:class:`_RoundStrategy` for one ``FitIns`` per node (the round's :class:`Instruction`: its
state as the FitIns parameters, its config as JSON) and exchanges four messages of type
``train`` with every node (setup: public keys; share keys: encrypted Shamir shares;
collect masked vectors: the ClientApp runs, and its update leaves the node only masked;
unmask: key shares). It ends by handing the strategy the *sum* only: dequantised, divided
by the summed weights. The four ``send_and_receive`` calls go through :class:`ExchangeGrid`,
which pulls with the engine's :func:`~fedtopic_pipelines.flower.engine.exchange` (every
``poll_s``, bounded by the round timeout) instead of Flower's 3 s polling.

**What a node hands to the mod** (:func:`update_to_fitres`): its update as one flat float64
vector (tensors, then BatchNorm statistics, then metrics / ``METRIC_SCALE``, then the share
of its coordinates the quantiser will clip) with FitRes ``num_examples`` the SecAgg+ weight:

* ``mean`` reduction (gradients, weights): weight = its example count, so Flower's result
  is the example-weighted mean (gFedNTM eq. 2) of every entry;
* ``sum`` reduction (statistics, PC-TD): weight 1 for everyone and the metrics multiplied by
  the count, so the result times the number of contributors is the sum;
* ``unweighted`` (client-level DP with the noise at the clients, whose noise is calibrated to
  the plain mean of the clipped updates): weight 1, the metrics multiplied by the count.

Its FitRes metrics (plaintext, as in every SecAgg+ deployment) carry only what the server
needs to read the sum back: the update kind, the layout (names, dtypes, shapes), the metric
names and the example count. Per client the server sees no tensor value, no metric value.

**What the server gets** (:class:`SecureReplies`): one :class:`Update` with client id
:data:`SECURE_AGGREGATE`, the round's kind, the weighted mean (``mean``) or the sum
(``sum``) of the tensors and statistics, the summed example count, and the example-weighted
mean of each metric (the round's loss; never one organisation's); ``unweighted``: the plain mean. ``contributors`` names
the organisations in the sum with their declared counts, so that the server can check each
against what it declared when it prepared. Nodes that dropped out are ``failures``.

**Precision.** The mod scales each entry by ``weight / max_weight``, clips it to
``[-clipping_range, clipping_range]`` and rounds it stochastically to one of
``quantization_range`` levels. Per coordinate the result is off by at most
:func:`quantisation_bound`: ``k * 2 * clipping_range / quantization_range * max_weight / W``
for a mean over ``k`` contributors with summed weight ``W`` (times ``k`` for a sum). An entry
is clipped when ``|value| > clipping_range * max_weight / weight``; each node logs how many of
its coordinates were, and the server logs the aggregate share.

Row-indexed gradients (``sparse_rows``, Word2Vec) cannot be summed this way (each node sends
other rows, and the rows themselves are what they reveal): such a round stops the run.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.serverapp import Grid

from fedtopic_pipelines.core.federated.engine import FederationError
from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Instruction, Replies, Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import is_variance
from fedtopic_pipelines.core.privacy.defences import DP_LEVEL_KEY, NOISE_KEYS
from fedtopic_pipelines.flower.records import (
    ARRAYS,
    CONFIG,
    LAYOUT_KEYS,
    STATISTICS,
    TENSORS,
    MalformedRecord,
    instruction_to_record,
    pack,
    record_to_instruction,
)

logger = logging.getLogger(__name__)

SECURE_MESSAGE_TYPE = MessageType.TRAIN  # "train": the only type secaggplus_mod intercepts
INSTRUCTION_KEY = "fedtopic.instruction"  # FitIns config: the instruction's config and layout, JSON
META_KEY = "fedtopic.secagg"  # FitRes metrics: kind, layout, metric names, example count, JSON
METRIC_SCALE = 256.0  # metrics enter the vector divided by this (a loss of hundreds must not clip)
REDUCTION_KEY = "secagg.reduction"  # an instruction may ask for "mean", "sum" or "unweighted" explicitly
DP_NOISE_KEY = NOISE_KEYS[1]  # in an instruction's config: client-level DP with the noise at the clients
STAGES = ("setup", "share keys", "collect masked vectors", "unmask")


@dataclass(frozen=True)
class SecureReplies(Replies):
    """A secure round's replies: one aggregate update, and the organisations summed into it with
    the example counts they declared (plaintext in SecAgg+: Flower's FitRes ``num_examples``), in
    :class:`Replies`'s ``contributors``."""


@dataclass(frozen=True)
class SecAggSettings:
    """``privacy.secagg`` as the engine uses it (Flower 1.42's ``SecAggPlusWorkflow`` arguments)."""

    num_shares: int | float = 3
    reconstruction_threshold: int | float = 2
    max_weight: float = 1000.0
    clipping_range: float = 8.0
    quantization_range: int = 4194304
    modulus_range: int = 4294967296
    timeout: float | None = None

    @classmethod
    def of(cls, privacy: Any) -> SecAggSettings | None:
        """The settings when ``privacy`` (a ``PrivacyConfig``, or None) turns secure aggregation on."""
        if privacy is None or not getattr(privacy, "secure_aggregation", False):
            return None
        cfg = privacy.secagg
        return cls(
            num_shares=cfg.num_shares,
            reconstruction_threshold=cfg.reconstruction_threshold,
            max_weight=float(cfg.max_weight),
            clipping_range=float(cfg.clipping_range),
            quantization_range=int(cfg.quantization_range),
            modulus_range=int(cfg.modulus_range),
            timeout=cfg.timeout,
        )

    def workflow(self, timeout_s: float) -> SecAggPlusWorkflow:
        """Flower's workflow; each of its four exchanges waits ``timeout`` or, unset, ``timeout_s``."""
        return SecAggPlusWorkflow(
            self.num_shares,
            self.reconstruction_threshold,
            max_weight=self.max_weight,
            clipping_range=self.clipping_range,
            quantization_range=self.quantization_range,
            modulus_range=self.modulus_range,
            timeout=self.timeout if self.timeout is not None else timeout_s,
        )


REDUCTIONS = ("mean", "sum", "unweighted")


def reduction(instruction: Instruction) -> str:
    """``sum`` for sufficient statistics (they add); ``unweighted`` (every organisation's update
    counts the same) under client-level DP with noise at the clients, whose noise is calibrated to
    that mean; ``mean`` (example-weighted, gFedNTM eq. 2) otherwise, sample-level DP included
    (each update is already private: the weighted mean is post-processing)."""
    explicit = instruction.config.get(REDUCTION_KEY)
    if explicit in REDUCTIONS:
        return str(explicit)
    if instruction.config.get("action") == UpdateKind.STATISTICS.value:
        return "sum"
    client_level = DP_NOISE_KEY in instruction.config and instruction.config.get(DP_LEVEL_KEY) != "sample"
    return "unweighted" if client_level else "mean"


def quantisation_bound(settings: SecAggSettings, contributors: int, total_weight: float, reduce: str) -> float:
    """The most a coordinate of the secure result can differ from the exact mean (or sum) through
    SecAgg+'s stochastic rounding alone: each contributor is off by less than one quantisation step
    ``2 c / Q`` of its entry scaled by ``weight / max_weight``; the server divides the sum of the
    scaled entries by ``W / max_weight`` (``W``: the summed weights). Clipped entries are not covered."""
    step = 2.0 * settings.clipping_range / settings.quantization_range
    mean = contributors * step * settings.max_weight / total_weight
    return mean * contributors if reduce == "sum" else mean


# Node side ---------------------------------------------------------------------------------
def fitins_to_instruction(content: RecordDict) -> Instruction:
    """The :class:`Instruction` that :func:`instruction_to_fitins` put into a FitIns."""
    try:
        fitins = compat.recorddict_to_fitins(content, keep_input=True)
        header = json.loads(str(fitins.config[INSTRUCTION_KEY]))
        names = list(header["arrays"])
        arrays = parameters_to_ndarrays(fitins.parameters)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecord(f"a secure round's FitIns cannot be read: {type(exc).__name__}: {exc}") from None
    if len(names) != len(arrays):
        raise MalformedRecord(f"a secure round's FitIns has {len(arrays)} arrays for {len(names)} names")
    record = RecordDict(
        {
            CONFIG: ConfigRecord(header["config"]),
            ARRAYS: ArrayRecord({n: Array(a) for n, a in zip(names, arrays, strict=True)}),
        }
    )
    return record_to_instruction(record)


def _clip_limits(context: Context) -> tuple[float, float] | None:
    """``clipping_range`` and ``max_weight`` the mod stored in the node's state at setup (None: not set up)."""
    state = context.state.config_records.get(RECORD_KEY_STATE)
    if state is None or "clipping_range" not in state or "max_weight" not in state:
        return None
    return float(state["clipping_range"]), float(state["max_weight"])


def update_to_fitres(update: Update, reduce: str, context: Context | None = None) -> RecordDict:
    """The node's update as the FitRes records ``secaggplus_mod`` masks (see the module docstring)."""
    if update.kind is UpdateKind.SPARSE_ROWS or update.row_indices:
        raise FederationError("secure aggregation cannot sum row-indexed (sparse_rows) updates")
    _, layout = pack({TENSORS: update.tensors, STATISTICS: update.statistics})
    values = [t.detach().cpu().double().reshape(-1) for t in (*update.tensors.values(), *update.statistics.values())]
    n = update.num_examples
    # weight 1 (sum, unweighted): the metrics go in times n, and the server divides their sum by the summed n
    scale = 1.0 if reduce == "mean" else float(n)
    metrics = torch.tensor([float(v) * scale / METRIC_SCALE for v in update.metrics.values()], dtype=torch.float64)
    vector = torch.cat([*values, metrics]) if values else metrics
    weight = n if reduce == "mean" else 1
    clipped = 0.0
    limits = None if context is None else _clip_limits(context)
    if limits is not None and vector.numel() and weight > 0:
        clipping_range, max_weight = limits
        over = int((vector.abs() > clipping_range * max_weight / weight).sum())
        clipped = over / vector.numel()
        if over:
            logger.warning(
                "secure aggregation: %d of %d values of this update exceed %.4g and are clipped "
                "(raise privacy.secagg.clipping_range or max_weight)",
                over,
                vector.numel(),
                clipping_range * max_weight / weight,
            )
    vector = torch.cat([vector, torch.tensor([clipped], dtype=torch.float64)])
    meta = {
        "kind": update.kind.value,
        "num_examples": n,
        "round": update.round,
        "reduction": reduce,
        "metric_names": list(update.metrics),
        "layout": layout,
    }
    fitres = FitRes(
        status=Status(Code.OK, ""),
        parameters=ndarrays_to_parameters([vector.numpy()]),
        num_examples=weight,
        metrics={META_KEY: json.dumps(meta)},
    )
    return compat.fitres_to_recorddict(fitres, keep_input=True)


# Server side -------------------------------------------------------------------------------
def instruction_to_fitins(instruction: Instruction) -> FitIns:
    """The instruction as legacy FitIns: its packed arrays as parameters, its config and layout as JSON."""
    record = instruction_to_record(instruction)
    arrays = record.array_records[ARRAYS]
    header = {"config": dict(record.config_records[CONFIG]), "arrays": list(arrays)}
    parameters = ndarrays_to_parameters([array.numpy() for array in arrays.values()])
    return FitIns(parameters, {INSTRUCTION_KEY: json.dumps(header)})


class ExchangeGrid(Grid):
    """The engine's grid as the workflow sees it: ``send_and_receive`` is ``exchange`` (pulls every
    ``poll_s``, stops at the timeout), the rest is the wrapped grid's. It counts the messages of
    each of the workflow's stages and keeps, per node, why it dropped out (the first stage it missed)."""

    def __init__(self, grid: Grid, timeout_s: float, poll_s: float, exchange: Callable) -> None:
        self.grid = grid
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._exchange = exchange
        self.stage = 0
        self.sent = 0
        self.received = 0
        self.dropped: dict[int, str] = {}

    @property
    def run(self):
        return self.grid.run

    def set_run(self, run_id: int) -> None:
        self.grid.set_run(run_id)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        name = STAGES[min(self.stage, len(STAGES) - 1)]
        self.stage += 1
        replies, missing = self._exchange(self.grid, messages, timeout or self.timeout_s, self.poll_s)
        self.sent += len(messages)
        self.received += len(replies)
        for node, reason in missing.items():
            self.dropped.setdefault(node, f"secure aggregation, stage '{name}': {reason}")
        for node, reply in replies.items():
            if reply.has_error():
                error = f"error reply (code {reply.error.code}): {reply.error.reason}"
                self.dropped.setdefault(node, f"secure aggregation, stage '{name}': {error}")
        return list(replies.values())


class _RoundStrategy(LegacyStrategy):
    """The legacy strategy the workflow drives for one round: it hands out the FitIns and keeps what
    ``aggregate_fit`` receives (the aggregate parameters, and per node its weight and FitRes metrics)."""

    def __init__(self, grid: Grid, nodes: Iterable[int], fitins: FitIns, run_id: int) -> None:
        self.grid = grid
        self.nodes = list(nodes)
        self.fitins = fitins
        self.run_id = run_id
        self.aggregate: list[np.ndarray] | None = None
        self.results: dict[int, FitRes] = {}

    def initialize_parameters(self, client_manager) -> Parameters | None:
        return None

    def configure_fit(self, server_round, parameters, client_manager):
        return [(GridClientProxy(node, self.grid, self.run_id), self.fitins) for node in self.nodes]

    def aggregate_fit(self, server_round, results, failures):
        self.results = {proxy.node_id: fitres for proxy, fitres in results}
        if results:
            self.aggregate = parameters_to_ndarrays(results[0][1].parameters)
            return results[0][1].parameters, {}
        return None, {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


def _meta(fitres: FitRes) -> dict[str, Any]:
    try:
        meta = json.loads(str(fitres.metrics[META_KEY]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecord(f"no readable '{META_KEY}' in its FitRes metrics: {exc}") from None
    if not isinstance(meta, dict):
        raise MalformedRecord(f"'{META_KEY}' is not a JSON object")
    return meta


def _shared_meta(metas: Mapping[str, dict[str, Any]], kind: str, reduce: str) -> dict[str, Any]:
    """The one description every contributor sent; a sum of differently laid out vectors means nothing."""
    first = next(iter(metas.values()))
    shared = {k: first.get(k) for k in ("kind", "round", "reduction", "metric_names", "layout")}
    differing = sorted(o for o, m in metas.items() if {k: m.get(k) for k in shared} != shared)
    if differing:
        raise MalformedRecord(f"the organisations' updates are not laid out alike ({differing} differ)")
    if shared["kind"] != kind or shared["reduction"] != reduce:
        raise MalformedRecord(f"updates of kind {shared['kind']!r} ({shared['reduction']}); the round is {kind!r}")
    for org, meta in metas.items():
        n = meta.get("num_examples")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise MalformedRecord(f"'{org}' declares num_examples {n!r}")
    return shared


def floor_variances(statistics: dict[str, torch.Tensor], bound: float) -> int:
    """Securely aggregated variances at or below 0 but within ``bound`` of it, raised to ``bound``,
    in place; how many. Every organisation's variance is > 0, so their mean is too, and the sum
    read back is off by at most the quantisation bound: a value in [-bound, 0] is a small variance
    that rounding pushed below zero, and ``bound`` is within the same error of the true mean. A
    value below -bound is no rounding error and stays, for the server's check to reject."""
    raised = 0
    for name, value in statistics.items():
        if is_variance(name):
            low = (value <= 0) & (value >= -bound)
            raised += int(low.sum())
            value[low] = bound
    return raised


def _unflatten(vector: np.ndarray, meta: dict[str, Any], count: int, total: int, reduce: str):
    """The aggregate vector as tensors, statistics and metrics, plus the share of clipped values."""
    layout = meta["layout"]
    groups, names, dtypes, ndims, dims = (list(layout[k]) for k in LAYOUT_KEYS)
    metric_names = list(meta["metric_names"])
    sizes, shapes, position = [], [], 0
    for ndim in ndims:
        shape = [int(d) for d in dims[position : position + int(ndim)]]
        position += int(ndim)
        shapes.append(shape)
        sizes.append(math.prod(shape))
    needed = sum(sizes) + len(metric_names) + 1
    if vector.ndim != 1 or vector.size != needed:
        raise MalformedRecord(f"the aggregate has {vector.size} values; the layout needs {needed}")
    values = torch.from_numpy(np.asarray(vector, dtype=np.float64))
    if reduce == "sum":
        values = values * count  # Flower divides by the summed weights (1 each): the mean; we want the sum
    parts: dict[str, dict[str, torch.Tensor]] = {TENSORS: {}, STATISTICS: {}}
    offset = 0
    for group, name, dtype, shape, size in zip(groups, names, dtypes, shapes, sizes, strict=True):
        if group not in parts:
            raise MalformedRecord(f"the layout names group {group!r}")
        parts[group][name] = values[offset : offset + size].reshape(shape).to(getattr(torch, dtype)).clone()
        offset += size
    metrics_sum = values[offset : offset + len(metric_names)] * METRIC_SCALE
    if reduce == "unweighted":
        metrics_sum = metrics_sum * count / max(total, 1)  # Flower's mean of n_i m_i, times k, over the summed n
    elif reduce == "sum":
        metrics_sum = metrics_sum / max(total, 1)  # already times k above
    metrics = {name: float(v) for name, v in zip(metric_names, metrics_sum.tolist(), strict=True)}
    clipped = float(values[-1]) / (count if reduce == "sum" else 1)
    return parts[TENSORS], parts[STATISTICS], metrics, clipped


def _run_workflow(
    grid: Grid,
    adapter: ExchangeGrid,
    nodes: Mapping[int, str],
    instruction: Instruction,
    settings: SecAggSettings,
    timeout_s: float,
) -> tuple[_RoundStrategy, dict[str, int]]:
    """Run Flower's SecAgg+ workflow for one round over ``adapter``: its strategy (replies, sum) and message counts."""
    run = getattr(grid, "run", None)
    run_id = int(getattr(run, "run_id", run) or 0)
    strategy = _RoundStrategy(adapter, nodes, instruction_to_fitins(instruction), run_id)
    context = LegacyContext(
        Context(run_id=run_id, node_id=0, node_config={}, state=RecordDict(), run_config={}), strategy=strategy
    )
    context.state.config_records["config"] = ConfigRecord({"current_round": int(instruction.round)})
    context.state.array_records["parameters"] = ArrayRecord()
    start = time.perf_counter()
    settings.workflow(timeout_s)(adapter, context)
    counts = {"sent": adapter.sent, "received": adapter.received, "stages": adapter.stage}
    logger.debug("secure round %d: %s in %.2f s", instruction.round, counts, time.perf_counter() - start)
    return strategy, counts


def secure_round(
    grid: Grid,
    nodes: Mapping[int, str],
    instruction: Instruction,
    settings: SecAggSettings,
    kind: str,
    timeout_s: float,
    poll_s: float,
    exchange: Callable,
) -> tuple[SecureReplies, dict[str, int]]:
    """One training round through Flower's SecAgg+; the replies and the round's message counts."""
    reduce = reduction(instruction)
    update_kind = UpdateKind(kind.removeprefix("train."))
    if update_kind is UpdateKind.SPARSE_ROWS:
        raise FederationError(
            "privacy.secure_aggregation cannot sum row-indexed gradients (sparse_rows: each organisation sends "
            "other rows); train this family without secure aggregation"
        )
    adapter = ExchangeGrid(grid, timeout_s, poll_s, exchange)
    strategy, counts = _run_workflow(grid, adapter, nodes, instruction, settings, timeout_s)
    contributors = {nodes[node]: fitres for node, fitres in strategy.results.items() if node in nodes}
    failures = {
        org: adapter.dropped.get(node, "secure aggregation: left out of the sum")
        for node, org in nodes.items()
        if org not in contributors
    }
    if strategy.aggregate is None or not contributors:  # Flower's workflow halted: too few nodes left
        halted = f"secure aggregation halted after stage '{STAGES[max(adapter.stage - 1, 0)]}'"
        return SecureReplies([], {org: adapter.dropped.get(node, halted) for node, org in nodes.items()}), counts
    try:
        metas = {org: _meta(fitres) for org, fitres in contributors.items()}
        meta = _shared_meta(metas, update_kind.value, reduce)
        if meta["round"] != instruction.round:
            raise MalformedRecord(f"the updates answer round {meta['round']!r}, this is round {instruction.round}")
        counted = {org: int(m["num_examples"]) for org, m in metas.items()}
        if reduce == "mean" and any(contributors[o].num_examples != counted[o] for o in counted):
            raise MalformedRecord("a node's SecAgg+ weight is not the example count it declares")
        total = sum(counted.values())
        tensors, statistics, metrics, clipped = _unflatten(strategy.aggregate[0], meta, len(counted), total, reduce)
    except (MalformedRecord, IndexError, KeyError, TypeError, ValueError, AttributeError) as exc:
        reason = f"secure aggregate unreadable: {type(exc).__name__}: {exc}"
        return SecureReplies([], {**failures, **dict.fromkeys(contributors, reason)}), counts
    weight = total if reduce == "mean" else len(counted)
    bound = quantisation_bound(settings, len(counted), weight, reduce)
    if clipped > bound:
        logger.warning(
            "secure round %d: about %.3g%% of the summed values were clipped to +-%g * max_weight / weight "
            "(raise privacy.secagg.clipping_range or max_weight)",
            instruction.round,
            100 * clipped,
            settings.clipping_range,
        )
    raised = floor_variances(statistics, bound)
    if raised:
        logger.debug(
            "secure round %d: %d variances within the quantisation bound of 0 raised to it", instruction.round, raised
        )
    aggregate = Update(
        SECURE_AGGREGATE, update_kind, tensors, total, statistics=statistics, metrics=metrics, round=instruction.round
    )
    return SecureReplies([aggregate], failures, contributors=counted), counts
