"""``wikitext.filter_wiki`` must give gensim's ``filter_wiki`` output, character for character."""

from __future__ import annotations

import bz2
import random
import xml.etree.ElementTree as ET

import pytest
from gensim.corpora.wikicorpus import filter_wiki as gensim_filter_wiki
from gensim.corpora.wikicorpus import remove_template as gensim_remove_template

from fedtopic_pipelines.core.ingest.wikipedia import gensim_fragment
from fedtopic_pipelines.core.ingest.wikitext import filter_wiki, remove_table_formatting, remove_templates

# Markup pieces the generated texts are made of: templates (nested, unbalanced), tables at
# the start of a line and of the text, cells, links, files, refs, comments, interlanguage links.
PIECES = [
    "{{", "}}", "{", "}", "{{cite|a={{b}}}}", "{{{1}}}", "{|", "|}", "|-", "|-1", "|", "||", "|||", "!", "!!",
    "[[", "]]", "[", "]", "[[a|b]]", "[[File:x.png|thumb|cap]]", "[[Image:y.jpg|z]]", "[[Category:C]]",
    "[http://e.org desc]", "<ref>r</ref>", "<ref name=x/>", "<!-- c -->", "<math>x</math>", "<b>", "&amp;",
    "&nbsp;", "\n", "\n\n", "\n ", "  ", "\t", " ", "word", "style=", "bgcolor", "2 colspan", "rowspan",
    "class=", "align=", "scope=", "\n[[de:Wort]]", "\n[[fr-x:Mot]]", "'''", "==H==",
]  # fmt: skip


def fragment_texts() -> list[str]:
    with bz2.open(gensim_fragment()) as handle:
        data = handle.read()
    texts, position = [], 0
    while (begin := data.find(b"<page>", position)) >= 0:
        position = data.find(b"</page>", begin) + len(b"</page>")
        texts.append(ET.fromstring(data[begin:position]).findtext("revision/text") or "")
    return texts


def test_identical_to_gensim_on_every_page_of_the_real_fragment() -> None:
    texts = fragment_texts()
    assert len(texts) == 206
    assert sum(map(len, texts)) > 5_000_000  # the articles are real, long and full of tables and templates
    for k, text in enumerate(texts):
        assert filter_wiki(text) == gensim_filter_wiki(text), f"page {k} differs"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain words only",
        "a {{outer|{{inner}}}} b {{unclosed and the rest is dropped",
        "x }} y {{ z }}} w { {",
        "{{a}}{{b}}{{c}}",
        'style="x" first line\nsecond',  # table formatting anchored at the text's start
        "\n  bgcolor=red\nkept",
        "{| class=wikitable\n|-\n! h1 !! h2\n|-\n| a || b\n|}\ntail",
        "text\n[[de:Wort]]\n[[fr:Mot]]\n",
        "text\n[[de:Wort]]\n[[Category:X]]",
        "[[File:a.png|thumb|a [[link]] caption]] after",
        "<!-- a --><ref>b</ref>[http://x.org y] [[p|q]] &lt;tag&gt;",
    ],
)
def test_identical_to_gensim_on_edge_cases(text: str) -> None:
    assert filter_wiki(text) == gensim_filter_wiki(text)


def test_identical_to_gensim_on_generated_markup() -> None:
    rng = random.Random(20261122)
    for case in range(1500):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 60)))
        assert filter_wiki(text) == gensim_filter_wiki(text), f"case {case}: {text!r}"
        assert remove_templates(text) == gensim_remove_template(text), f"case {case}: {text!r}"


def test_table_formatting_at_the_start_and_on_later_lines() -> None:
    assert remove_table_formatting("align=left x\nkeep\n rowspan=2 y") == "\n\nkeep\n"
    assert remove_table_formatting("keep\nno format") == "keep\nno format"
