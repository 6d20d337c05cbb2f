"""LDA as gensim fits it (variational Bayes, batch mode), split into an organisation's E-step
and the server's M-step.

gensim's ``LdaModel`` with ``update_every=0`` makes one pass per M-step: the variational
E-step (``LdaModel.inference``) over every document gives the expected topic-word counts
``sstats`` (k x V, sum_d n_dw phi_dwk) and each document's gamma; ``LdaState.blend`` mixes
them into the running statistics with weight rho = (offset + pass + updates / chunksize)^-decay,
and the topics are lambda = eta + sstats. ``sstats`` is a sum over documents, hence over
organisations: each runs gensim's own E-step on its documents from the broadcast topics and
sends its k x V counts and its document count; the server adds them and blends with gensim's
``LdaState``. gamma (a document's topic proportions) never leaves its organisation. With every
organisation in a round this is gensim's batch LDA on the pooled documents; where one is
missing, ``blend`` stretches the counts received to the declared documents, as gensim does
for a partial update.

What differs from one process running gensim: each E-step starts every document's gamma from
a Gamma(100, 1/100) draw, here from each organisation's round seed instead of gensim's one
stream. The iteration runs to gensim's own tolerance, so the start moves the result by about
that tolerance; ``tests/core/families/test_lda.py`` measures the distance to gensim.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from fedtopic_pipelines.core.config import LDAConfig

DTYPE = np.float32  # gensim's default


def as_corpus(bow: Any) -> list[list[tuple[int, float]]]:
    """Documents (scipy, or a torch dense or CSR tensor) as gensim reads them: (id, count) rows."""
    if isinstance(bow, torch.Tensor):
        if bow.layout == torch.sparse_csr:
            bow = sp.csr_matrix(
                (bow.values().cpu().numpy(), bow.col_indices().cpu().numpy(), bow.crow_indices().cpu().numpy()),
                shape=tuple(bow.shape),
            )
        else:
            bow = sp.csr_matrix(bow.to_dense().cpu().numpy())
    bow = sp.csr_matrix(bow)
    ids, counts, starts = bow.indices.tolist(), bow.data.tolist(), bow.indptr.tolist()
    return [list(zip(ids[a:b], counts[a:b], strict=True)) for a, b in itertools.pairwise(starts)]


def random_state(seed: int) -> np.random.RandomState:
    """gensim's generator for ``seed``: ``RandomState(seed)`` as gensim seeds it where numpy's
    legacy seeding takes the value (0 to 2^32 - 1), else the same Mersenne Twister seeded
    through numpy's SeedSequence (the engine's derived seeds are 64-bit)."""
    if 0 <= seed < 2**32:
        return np.random.RandomState(seed)
    return np.random.RandomState(np.random.MT19937(seed))


class LDAModel(nn.Module):
    """gensim's LDA as a federated model.

    Shared: ``lam`` (k x V), the Dirichlet parameters whose expectation the E-step reads: gensim's
    random initial statistics before the first round, eta + sstats after each M-step. The
    server's state besides (in its checkpoints): ``sstats``, the running statistics that
    ``blend`` mixes, ``numdocs``, the documents they stand for (the organisations' declared
    count), and ``updates``, gensim's ``num_updates`` (documents seen in the first pass).
    """

    def __init__(self, vocab_size: int, config: LDAConfig, seed: int) -> None:
        from gensim.models.ldamodel import LdaModel  # deferred, as gensim is a heavy import (1 s)

        super().__init__()
        self.config = config
        self.seed = seed
        # gensim builds the priors and draws the initial statistics from the seed, as LdaModel(random_state=seed)
        self.vb = LdaModel(
            id2word={vocab_size - 1: ""},  # gensim reads the vocabulary size as 1 + the largest id
            num_topics=config.n_topics,
            alpha="symmetric" if config.alpha is None else config.alpha,
            eta="symmetric" if config.eta is None else config.eta,
            iterations=config.iterations,
            gamma_threshold=config.gamma_threshold,
            decay=config.decay,
            offset=config.offset,
            chunksize=config.chunksize,
            update_every=0,
            random_state=random_state(seed),
            dtype=DTYPE,
        )
        initial = np.array(self.vb.state.sstats, copy=True)
        self.lam = nn.Parameter(torch.from_numpy(initial), requires_grad=False)
        self.register_buffer("sstats", torch.from_numpy(initial.copy()))
        self.register_buffer("numdocs", torch.zeros((), dtype=torch.float64))
        self.register_buffer("updates", torch.zeros((), dtype=torch.float64))

    @property
    def n_topics(self) -> int:
        return int(self.lam.shape[0])

    def _expectation(self, seed: int) -> Any:
        """gensim's model at the broadcast topics, its gamma draws from ``seed``."""
        from gensim.matutils import dirichlet_expectation

        self.vb.expElogbeta = np.exp(dirichlet_expectation(self.lam.detach().numpy()))
        self.vb.random_state = random_state(seed)
        return self.vb

    def e_step(self, bow: Any, seed: int) -> tuple[np.ndarray, int]:
        """gensim's E-step on documents ``bow`` from the broadcast topics: their expected topic-word
        counts (k x V) and how many documents that is. Chunked as gensim chunks, which changes
        nothing but the memory of gamma."""
        from gensim.models.ldamodel import LdaState

        vb = self._expectation(seed)
        state = LdaState(vb.eta, vb.state.sstats.shape, DTYPE)
        corpus = as_corpus(bow)
        for start in range(0, len(corpus), self.config.chunksize):
            vb.do_estep(corpus[start : start + self.config.chunksize], state)
        return state.sstats, int(state.numdocs)

    @torch.no_grad()
    def m_step(self, summed: np.ndarray, documents: float, iteration: int) -> float:
        """gensim's M-step for pass ``iteration`` (from 1) on the summed counts of ``documents``
        documents: blend into the running statistics, lambda = eta + sstats. Returns rho."""
        from gensim.models.ldamodel import LdaState

        config = self.config
        pass_ = iteration - 1
        rho = (config.offset + pass_ + float(self.updates) / config.chunksize) ** -config.decay
        state = LdaState(self.vb.eta, tuple(self.sstats.shape), DTYPE)
        state.sstats = self.sstats.numpy().copy()
        state.numdocs = float(self.numdocs) or documents
        other = LdaState(self.vb.eta, tuple(self.sstats.shape), DTYPE)
        other.sstats = summed.astype(DTYPE, copy=False)
        other.numdocs = documents
        state.blend(rho, other)
        self.sstats.copy_(torch.from_numpy(np.asarray(state.sstats, dtype=DTYPE)))
        self.lam.copy_(torch.from_numpy(np.asarray(state.get_lambda(), dtype=DTYPE)))
        if pass_ == 0:  # gensim counts the documents of the first pass only (``extra_pass``)
            self.updates += documents
        return float(rho)

    @torch.no_grad()
    def topic_word(self) -> torch.Tensor:
        """The topics (k x V), lambda normalised by row: gensim's ``get_topics``."""
        lam = self.lam.detach().double()
        return (lam / lam.sum(dim=1, keepdim=True)).float()

    def doc_topic(self, bow: Any) -> torch.Tensor:
        """Documents' topic proportions, gamma normalised (gensim's ``get_document_topics`` without
        its threshold); the E-step's start drawn from the model's seed, so a document gets the same
        proportions at every call."""
        vb = self._expectation(self.seed)
        gamma, _ = vb.inference(as_corpus(bow))
        gamma = np.asarray(gamma, dtype=np.float64)
        return torch.from_numpy(gamma / gamma.sum(axis=1, keepdims=True)).float()

    def word_distribution(self, bow: Any) -> torch.Tensor:
        """p(w | d) = theta_d . beta, theta inferred from ``bow`` (completion perplexity)."""
        return self.doc_topic(bow) @ self.topic_word()
