"""Trains contextualized-topic-models 2.6.1's ProdLDA, CombinedTM or ZeroShotTM; run by bench_quality.py.

Runs inside the reference's own virtual environment (``bench_quality.py`` creates it), never
the project's, and imports nothing from the project: it reads the pooled training and test
matrices from an ``.npz`` file and writes the topic-word matrix, the test documents' topic
vectors and its CPU and wall time to another.

How plain ProdLDA is trained with CTM 2.6.1 and no sentence-transformer: both of its models
feed the encoder a "contextual" vector (``ZeroShotTM``: only that vector, through
``Linear(contextual_size, hidden)``; ``CombinedTM``: the BoW concatenated with an adapted
contextual vector). ``ZeroShotTM`` with the bag of words itself as the contextual vector
(``contextual_size = V``) is exactly avitm's ProdLDA encoder: softplus MLP on the BoW,
affine-free BatchNorm on mu and log-variance, product-of-experts decoder with BatchNorm.
Every other setting is CTM's default (Adam with betas (0.99, 0.99), lr 2e-3, dropout 0.2,
learned priors, summed loss, ``drop_last`` batches) except the topics, hidden sizes and
batch size, which follow the project's, and ``num_data_loader_workers=0`` so the CPU time of
this process is the CPU time of training.

With ``family`` combinedtm or zeroshottm in the settings, the model is that one, fed the
sentence embeddings the benchmark computed once for every system (``train_embeddings``,
``test_embeddings`` in the input file).

    <ctm-venv>/bin/python bench/ctm_runner.py INPUT.npz OUTPUT.npz
"""

from __future__ import annotations

import json
import logging
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

logger = logging.getLogger("ctm_runner")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    source, target = sys.argv[1], sys.argv[2]
    data = np.load(source, allow_pickle=False)
    settings = json.loads(str(data["settings"]))
    torch.set_num_threads(settings["threads"])
    torch.manual_seed(settings["seed"])
    np.random.seed(settings["seed"])

    import contextualized_topic_models
    from contextualized_topic_models.datasets.dataset import CTMDataset
    from contextualized_topic_models.models.ctm import CombinedTM, ZeroShotTM

    train = sp.csr_matrix((data["train_data"], data["train_indices"], data["train_indptr"]), shape=data["train_shape"])
    test = sp.csr_matrix((data["test_data"], data["test_indices"], data["test_indptr"]), shape=data["test_shape"])
    vocab_size = train.shape[1]
    idx2token = {j: f"w{j}" for j in range(vocab_size)}
    family = settings.get("family", "prodlda")
    if family == "prodlda":
        # CTM's own data preparation gives a CSR BoW; the "contextual" vectors are dense, as embeddings are
        contextual, test_contextual, model_class = train.toarray(), test.toarray(), ZeroShotTM
    else:  # the real thing: the same sentence embeddings as ours, CombinedTM or ZeroShotTM
        contextual, test_contextual = data["train_embeddings"], data["test_embeddings"]
        model_class = CombinedTM if family == "combinedtm" else ZeroShotTM
    dataset = CTMDataset(contextual, train, idx2token)
    model = model_class(
        bow_size=vocab_size,
        contextual_size=contextual.shape[1],
        n_components=settings["n_topics"],
        hidden_sizes=tuple(settings["hidden_sizes"]),
        batch_size=settings["batch_size"],
        num_epochs=settings["epochs"],
        num_data_loader_workers=0,
    )
    logger.info(
        "CTM %s %s (%s): %d documents, V = %d, %d epochs, %d threads",
        contextualized_topic_models.__version__,
        model_class.__name__,
        "BoW as the contextual input" if family == "prodlda" else "sentence embeddings",
        train.shape[0],
        vocab_size,
        settings["epochs"],
        torch.get_num_threads(),
    )
    cpu, wall = time.process_time(), time.perf_counter()
    model.fit(dataset, do_train_predictions=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    # posterior mean in eval mode, as the project's doc_topic (not CTM's 20-sample average)
    net = model.model.eval()
    with torch.no_grad():
        x = torch.from_numpy(test.toarray().astype(np.float32))
        mu, _ = net.get_posterior(x, torch.from_numpy(np.asarray(test_contextual, dtype=np.float32)))
        theta = F.softmax(mu, dim=1).numpy()
    documents = settings["epochs"] * (train.shape[0] // settings["batch_size"]) * settings["batch_size"]
    np.savez(
        target,
        topic_word=model.get_topic_word_matrix(),
        test_theta=theta,
        cpu_s=cpu,
        wall_s=wall,
        documents=documents,
        threads=torch.get_num_threads(),
    )


if __name__ == "__main__":
    main()
