"""The ProdLDA family's data check says what to change, and blames BatchNorm only when it is on."""

from __future__ import annotations

import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.config import TrainConfig, from_mapping
from fedtopic_pipelines.core.families.prodlda import ProdLDAFamily


@pytest.mark.parametrize(("normalization", "blamed"), [("layer", False), ("batch", True)])
def test_one_document_left_by_a_tiny_vocabulary_names_the_floors(normalization, blamed) -> None:
    config = from_mapping(TrainConfig, {"model": {"normalization": normalization}}, "train")
    with pytest.raises(ValueError, match="vocabulary of 5 terms.*'vocab_consensus.min_total_count'") as caught:
        ProdLDAFamily().validate_data("papers", sp.csr_matrix((1, 5)), config)
    assert ("BatchNorm" in str(caught.value)) == blamed
