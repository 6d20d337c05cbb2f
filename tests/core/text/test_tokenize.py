from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.text.tokenize import term_counts, tokenize_documents


def test_tokenize_lowercases_and_drops_stopwords_numbers_short_tokens() -> None:
    docs = tokenize_documents(["The Rocket launched in 1986, at NASA's site; ok x2"], PreprocessConfig())
    assert docs == [["rocket", "launched", "nasa", "site"]]


def test_every_tokenizer_runs_without_nltk_data() -> None:
    for name in ("regexp", "wordpunct", "toktok"):
        assert "rocket" in tokenize_documents(["the rocket"], PreprocessConfig(tokenizer=name))[0]


def test_term_counts() -> None:
    assert term_counts([["a", "b"], ["a"]]) == {"a": 2, "b": 1}
