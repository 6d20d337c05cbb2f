"""Federated LDA by gensim's own distributed scheme: the E-step at each organisation, the
sufficient statistics summed at the server, gensim's M-step (seed 004's FedLDA baseline).

gensim's ``LdaModel`` in distributed mode sends each worker a chunk of documents and the
current model; a worker runs the variational E-step (``do_estep``) into an ``LdaState``
(the expected topic-word counts, ``sstats``, and its number of documents); the dispatcher
sums the states (``LdaState.merge``) and the model runs its M-step (``do_mstep``) with
the learning rate ``rho``. Here an organisation plays the worker on its own documents, so
only its k x V expected counts and its document count leave it; the per-document topic
proportions (gamma) stay. One M-step per pass over every organisation's documents is
gensim's batch mode (``update_every=0``).

The E-step starts each document's iteration from gammas drawn from the model's seeded
generator. In one process the organisations draw in their order from that one generator,
which makes a federated run equal to gensim's batch ``LdaModel`` on the organisations'
documents concatenated in the same order (tested); deployed, each organisation would draw
its own starting gammas, which changes the start of each document's iteration only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

BowDocument = Sequence[tuple[int, float]]


def federated_lda(
    corpora: Mapping[str, Sequence[BowDocument]],
    id2word: Any,
    num_topics: int,
    passes: int,
    seed: int,
    chunksize: int = 2000,
    iterations: int = 50,
    decay: float = 0.5,
    offset: float = 1.0,
    dtype: Any = None,
    progress: bool = True,
) -> tuple[Any, list[dict[str, Any]]]:
    """A gensim ``LdaModel`` trained by ``passes`` rounds of E-steps at the organisations and one
    M-step at the server; the history has each round's documents and statistics' bytes per
    organisation (what crossed the wire). ``dtype``: gensim's (float32 by default)."""
    from gensim import utils  # deferred: gensim is a heavy import
    from gensim.models.ldamodel import LdaModel, LdaState

    empty = [org for org, corpus in corpora.items() if len(corpus) == 0]
    if empty:
        raise ValueError(f"federated LDA: organisations {empty} have no document")
    model = LdaModel(
        id2word=id2word,
        num_topics=num_topics,
        random_state=seed,
        chunksize=chunksize,
        iterations=iterations,
        decay=decay,
        offset=offset,
        update_every=0,
        passes=passes,
        **({"dtype": dtype} if dtype is not None else {}),
    )
    model.state.numdocs += sum(len(corpus) for corpus in corpora.values())
    history: list[dict[str, Any]] = []
    for pass_ in tqdm(range(passes), desc="federated LDA", unit="pass", disable=not progress):
        merged = LdaState(model.eta, model.state.sstats.shape, model.dtype)
        sent: dict[str, int] = {}
        for org, corpus in corpora.items():  # at the organisation: the E-step on its documents
            state = LdaState(model.eta, model.state.sstats.shape, model.dtype)
            for chunk in utils.grouper(list(corpus), chunksize, as_numpy=False, dtype=model.dtype):
                model.do_estep(chunk, state)
            sent[org] = int(state.sstats.nbytes)
            merged.merge(state)  # at the server: the sum of the organisations' statistics
        rho = pow(offset + pass_ + (model.num_updates / chunksize), -decay)
        model.do_mstep(rho, merged, pass_ > 0)
        history.append({"round": pass_ + 1, "documents": int(merged.numdocs), "bytes": sent})
    return model, history
