from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.text.tokenize import document_frequency_vocabulary, term_counts, tokenize_documents


def test_tokenize_lowercases_and_drops_stopwords_numbers_short_tokens() -> None:
    docs = tokenize_documents(["The Rocket launched in 1986, at NASA's site; ok x2"], PreprocessConfig())
    assert docs == [["rocket", "launched", "nasa", "site"]]


def test_every_tokenizer_runs_without_nltk_data() -> None:
    for name in ("regexp", "wordpunct", "toktok"):
        assert "rocket" in tokenize_documents(["the rocket"], PreprocessConfig(tokenizer=name))[0]


def test_document_frequency_limits() -> None:
    docs = [["a", "b", "c"], ["a", "b"], ["a", "d"], ["a"]]
    keep, removed = document_frequency_vocabulary(docs, min_df=2, max_df=0.75)
    assert keep == {"b"}  # a is in 4/4 > 0.75, c and d in one document
    assert removed == 3


def test_term_counts() -> None:
    assert term_counts([["a", "b"], ["a"]]) == {"a": 2, "b": 1}
