import gzip
import json
import sqlite3

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope.errors import ConfigError, DataError
from halluscope.knowledge.passages import FACTSCORE_SEPARATOR, ArticleStore, split_passages, text_passages
from halluscope.knowledge.retrieval import DenseRetriever, Encoder
from halluscope.storage.fs import Location


def _words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


# --- split_passages ----------------------------------------------------------------------------

def test_short_text_is_one_passage():
    assert split_passages("  Ada   Lovelace was\na mathematician. ") == ["Ada Lovelace was a mathematician."]


def test_paragraphs_are_packed_whole():
    text = "\n\n".join([_words(4, 0), _words(4, 4), _words(4, 8)])
    assert split_passages(text, max_words=10) == [f"{_words(4, 0)}\n\n{_words(4, 4)}", _words(4, 8)]


def test_long_paragraph_is_packed_by_sentences():
    sentences = [f"{_words(6, i * 6)}." for i in range(3)]
    assert split_passages(" ".join(sentences), max_words=13) == [f"{sentences[0]} {sentences[1]}", sentences[2]]


def test_overlong_sentence_is_cut_by_words():
    passages = split_passages(_words(25), max_words=10)
    assert passages == [_words(10, 0), _words(10, 10), _words(5, 20)]


def test_every_word_kept_in_order_and_bounded():
    text = "\n\n".join(f"{_words(7 * k + 3, 100 * k)}. Short one! Another? " * (k % 3 + 1) for k in range(8))
    passages = split_passages(text, max_words=20)
    assert all(len(p.split()) <= 20 for p in passages)
    assert " ".join(passages).split() == text.split()
    assert split_passages(text, max_words=20) == passages


def test_empty_text_and_bad_limit():
    assert split_passages(" \n\n \t") == []
    with pytest.raises(ValueError):
        split_passages("x", max_words=0)


def test_factscore_passages_are_kept_and_markers_removed():
    stored = FACTSCORE_SEPARATOR.join(["<s>Ada was born in 1815.</s><s>She wrote notes.</s>",
                                       "<s>She died in 1852.</s>"])
    assert text_passages(stored, 256) == ["Ada was born in 1815.\n\nShe wrote notes.", "She died in 1852."]
    assert text_passages(["First paragraph.", "Second paragraph."], 2) == ["First paragraph.", "Second paragraph."]


# --- loaders -----------------------------------------------------------------------------------

def _factscore_db(path, rows):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE documents (title PRIMARY KEY, text);")
    con.executemany("INSERT INTO documents VALUES (?,?)", rows)
    con.commit()
    con.close()


def test_sqlite_in_factscore_layout(tmp_path):
    db = tmp_path / "enwiki.db"
    _factscore_db(db, [
        ("Ada Lovelace",
         FACTSCORE_SEPARATOR.join(["<s>Ada was a mathematician.</s>", "<s>She worked with Babbage.</s>"])),
        ("Alan Turing", "Alan Turing was a computer scientist.\n\nHe broke Enigma."),
        ("Broken", None),
    ])
    store = ArticleStore.load(str(db))
    assert store.articles["Ada Lovelace"] == ["Ada was a mathematician.", "She worked with Babbage."]
    assert store.articles["Alan Turing"] == ["Alan Turing was a computer scientist.\n\nHe broke Enigma."]
    assert store.resolve("alan_turing") == "Alan Turing" and store.resolve("  ADA   lovelace ") == "Ada Lovelace"
    assert store.resolve("Grace Hopper") is None
    assert store.skipped == [(3, "missing text")]
    desc = store.describe()
    assert desc["articles"] == 2 and desc["passages"] == 3 and len(desc["source_sha256"]) == 64

    only = ArticleStore.load(str(db), titles=["alan turing"])
    assert list(only.articles) == ["Alan Turing"] and only.sha256 != store.sha256
    with pytest.raises(DataError, match="requested titles"):
        ArticleStore.load(str(db), titles=["Nobody"])


def test_sqlite_over_fsspec_url(tmp_path):
    db = tmp_path / "k.db"
    _factscore_db(db, [("Ada Lovelace", "<s>Ada was a mathematician.</s>")])
    fsspec.filesystem("memory").pipe("/kb/k.db", db.read_bytes())
    assert ArticleStore.load("memory://kb/k.db").articles["Ada Lovelace"] == ["Ada was a mathematician."]


def test_jsonl_counts_bad_lines(tmp_path):
    path = tmp_path / "articles.jsonl"
    lines = [
        json.dumps({"title": "Ada Lovelace", "text": "Ada was a mathematician."}),
        "{not json",
        json.dumps({"text": "no title"}),
        "",
        json.dumps({"title": "No Text"}),
        json.dumps(["a", "list"]),
        json.dumps({"title": "Ada Lovelace", "text": "a duplicate"}),
        json.dumps({"title": "Alan Turing", "text": ["He was born in 1912.", "He broke Enigma."]}),
        json.dumps({"title": "Empty", "text": "   "}),
    ]
    path.write_text("\n".join(lines) + "\n")
    store = ArticleStore.load(str(path), max_words=5)
    assert store.articles["Alan Turing"] == ["He was born in 1912.", "He broke Enigma."]
    assert store.articles["Ada Lovelace"] == ["Ada was a mathematician."]
    assert store.skipped == [(2, "invalid JSON"), (3, "missing title"), (5, "missing text"),
                             (6, "not a JSON object"), (7, "duplicate title"), (9, "empty text")]

    gz = tmp_path / "articles.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert ArticleStore.load(Location.from_url(f"file://{gz}"), max_words=5).sha256 == store.sha256


def test_parquet(tmp_path):
    path = tmp_path / "articles.parquet"
    pq.write_table(pa.table({"title": ["Ada Lovelace", None, "Alan Turing"],
                             "text": ["Ada was a mathematician.", "orphan", "Alan broke Enigma."]}), path)
    store = ArticleStore.load(str(path))
    assert list(store.articles) == ["Ada Lovelace", "Alan Turing"]
    assert store.skipped == [(2, "missing title")]

    pq.write_table(pa.table({"name": ["x"], "text": ["y"]}), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match="no column title"):
        ArticleStore.load(str(tmp_path / "bad.parquet"))


def test_missing_empty_and_unknown_files(tmp_path):
    with pytest.raises(DataError, match="not found: .*nope.jsonl"):
        ArticleStore.load(str(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="empty.jsonl holds no usable articles"):
        ArticleStore.load(str(tmp_path / "empty.jsonl"))
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(DataError, match="junk.db"):
        ArticleStore.load(str(tmp_path / "junk.db"))
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(DataError, match="format"):
        ArticleStore.load(str(tmp_path / "a.txt"))


# --- dense retrieval (real all-MiniLM-L6-v2) -------------------------------------------------

ARTICLES = {
    "Marta Kowalczyk": [
        "Marta Kowalczyk (born 14 March 1961 in Gdańsk) is a Polish glaciologist known for her ice-core studies "
        "of Svalbard.",
        "She studied physics at the University of Warsaw and completed a doctorate on firn densification at the "
        "University of Bern in 1989.",
        "From 1992 to 2010 she led the drilling programme at the Hornsund polar station, recovering a 300-metre "
        "core from the Hansbreen glacier.",
        "In 2004 she received the Seligman Crystal of the International Glaciological Society for her work on "
        "meltwater percolation.",
        "Kowalczyk is married to the cellist Tomasz Nowak; the couple have two daughters and live in Kraków.",
        "She has written two popular-science books, including The Memory of Ice (2015), translated into eleven "
        "languages.",
    ],
    "Jonas Ekberg": [
        "Jonas Ekberg (born 2 July 1988 in Malmö) is a Swedish former professional footballer who played as a "
        "centre-back.",
        "He came through the youth academy of Malmö FF and made his senior debut in 2006.",
        "In 2011 he joined FC Twente in the Netherlands for a fee of four million euros.",
        "Ekberg won 42 caps for the Sweden national team and played at UEFA Euro 2016 in France.",
        "He retired in 2021 after a serious knee injury and became assistant coach of IFK Göteborg.",
        "Off the pitch he is a keen chess player and founded a charity for youth football in Rosengård.",
    ],
    "Amara Okafor": [
        "Amara Okafor (born 1975 in Enugu) is a Nigerian novelist and essayist.",
        "She studied English literature at the University of Nigeria, Nsukka, and later earned an MFA from the "
        "University of Iowa.",
        "Her debut novel, The Salt Harvest (2003), follows a family of fishermen in a village of the Niger Delta.",
        "She won the Commonwealth Book Prize in 2011 for her third novel, Rivers of Glass.",
        "Okafor teaches creative writing in Lagos, where she lives with her husband, an architect.",
    ],
    "Hiroshi Tanabe": [
        "Hiroshi Tanabe (born 1950 in Sapporo) is a Japanese architect known for public buildings in timber.",
        "His best-known work is the Asahikawa Public Library (1994), built entirely from local larch wood.",
        "He was awarded the Alvar Aalto Medal in 2009.",
        "After the 2011 Tōhoku earthquake he designed temporary shelters made of recycled cardboard tubes.",
        "From 1998 to 2005 he was a visiting professor at ETH Zurich.",
        "Tanabe is an avid mountaineer and climbed Denali in 1983.",
    ],
}

CLAIMS = [  # (claim, article, index of the passage holding the fact)
    ("received the Seligman Crystal award", "Marta Kowalczyk", 3),
    ("earned her PhD at the University of Bern", "Marta Kowalczyk", 1),
    ("played at the European Championship in 2016", "Jonas Ekberg", 3),
    ("retired because of a knee injury", "Jonas Ekberg", 4),
    ("her first novel is set in a fishing village in the Niger Delta", "Amara Okafor", 2),
    ("won the Commonwealth Book Prize", "Amara Okafor", 3),
    ("designed a library made of larch wood", "Hiroshi Tanabe", 1),
    ("taught at ETH Zurich", "Hiroshi Tanabe", 4),
]


class CountingEncoder:
    """Delegates to the real encoder, remembering every text it was asked to embed."""

    def __init__(self, inner: Encoder) -> None:
        self.inner, self.name, self.texts, self.calls = inner, inner.name, [], 0

    def encode(self, texts):
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def encoder():
    return Encoder(batch_size=32)


@pytest.fixture(scope="module")
def store():
    return ArticleStore({t: list(ps) for t, ps in ARTICLES.items()}, "test", 256)


@pytest.fixture(scope="module")
def retriever(store, encoder):
    return DenseRetriever.build(store, encoder)


def test_encoder_vectors_are_unit_float32(encoder):
    vectors = encoder.encode(["one sentence", "another one"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)
    assert encoder.name.startswith("all-MiniLM-L6-v2@")


def test_missing_model_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="nope"):
        Encoder(tmp_path / "nope")


@pytest.mark.parametrize("claim,title,index", CLAIMS)
def test_fact_passage_ranks_first(retriever, claim, title, index):
    expected = ARTICLES[title][index]
    restricted = retriever.search(f"{title} {claim}", k=3, title=title)
    assert [p for p, _ in restricted][0] == expected
    assert len(restricted) == 3 and restricted[0][1] >= restricted[1][1] >= restricted[2][1]
    assert retriever.search(f"{title} {claim}", k=5)[0][0] == expected


def test_a_persons_facts_are_searched_in_one_encoder_call_with_each_facts_own_ranking(retriever):
    """FActScore-style evidence: every fact of a biography encoded at once, each ranked as if
    searched alone (the batch pads; the scores agree to float32 rounding)."""
    claims = [(claim, title) for claim, title, _ in CLAIMS]
    for title in {t for _, t in claims}:
        queries = [f"{title} {c}" for c, t in claims if t == title]
        counting = CountingEncoder(retriever.encoder)
        batched = DenseRetriever(retriever.index, retriever.titles, retriever.passages, counting,
                                 retriever.info).search_many(queries, k=3, title=title)
        assert (counting.calls, counting.texts) == (1, queries)
        for query, hits in zip(queries, batched):
            alone = retriever.search(query, k=3, title=title)
            assert [p for p, _ in hits] == [p for p, _ in alone]
            assert [s for _, s in hits] == pytest.approx([s for _, s in alone], abs=1e-5)
    assert retriever.search_many([], title="Hiroshi Tanabe") == []
    assert retriever.search_many(["a", "b"], title="Grace Hopper") == [[], []]


def test_restriction_and_unknown_titles(retriever):
    hits = retriever.search("Hiroshi Tanabe taught at ETH Zurich", k=50, title="hiroshi  TANABE")
    assert sorted(p for p, _ in hits) == sorted(ARTICLES["Hiroshi Tanabe"])
    assert retriever.search("anything", title="Grace Hopper") == [] and not retriever.has_article("Grace Hopper")
    assert len(retriever.search("anything", k=100)) == sum(map(len, ARTICLES.values()))


def test_persisted_index_is_reused(tmp_path, store, encoder, retriever):
    root = Location.from_url(f"file://{tmp_path}")
    counting = CountingEncoder(encoder)
    first = DenseRetriever.cached(store, counting, root)
    assert len(counting.texts) == sum(map(len, ARTICLES.values()))
    counting.texts.clear()
    second = DenseRetriever.cached(store, counting, root)
    assert counting.texts == []
    assert second.describe() == first.describe() == retriever.describe()
    query = "Jonas Ekberg joined FC Twente"
    loaded, built = second.search(query), retriever.search(query)
    assert [p for p, _ in loaded] == [p for p, _ in built]
    assert [s for _, s in loaded] == pytest.approx([s for _, s in built])
    assert second.search(query, title="Jonas Ekberg")[0][0] == ARTICLES["Jonas Ekberg"][2]
    desc = second.describe()
    assert desc["store_sha256"] == store.sha256 and desc["dim"] == 384 and desc["passages"] == 23


def test_damaged_index_is_rebuilt(tmp_path, store, encoder):
    root = Location.from_url(f"file://{tmp_path}")
    first = DenseRetriever.cached(store, encoder, root)
    root.child(first.describe()["key"], "index.faiss").write_bytes_atomic(b"truncated")
    with pytest.raises(DataError, match="incomplete"):
        DenseRetriever.load(root.child(first.describe()["key"]), encoder)
    counting = CountingEncoder(encoder)
    DenseRetriever.cached(store, counting, root)
    assert len(counting.texts) == 23


def test_articles_and_index_on_s3(s3_endpoint, bucket, tmp_path, store, encoder):
    from halluscope.storage.spec import StorageSpec

    lines = "".join(json.dumps({"title": t, "text": FACTSCORE_SEPARATOR.join(ps)}) + "\n" for t, ps in ARTICLES.items())
    opts = {"client_kwargs": {"endpoint_url": s3_endpoint}}
    fs = fsspec.filesystem("s3", **opts)
    fs.pipe(f"{bucket}/kb/articles.jsonl", lines.encode())
    remote = ArticleStore.load(f"s3://{bucket}/kb/articles.jsonl", storage_options=opts)
    assert remote.articles == store.articles and remote.sha256 == store.sha256
    assert remote.source == f"s3://{bucket}/kb/articles.jsonl"

    root = Location.from_url(f"s3://{bucket}/indexes", StorageSpec(root=f"s3://{bucket}", endpoint_url=s3_endpoint))
    DenseRetriever.cached(remote, encoder, root)
    counting = CountingEncoder(encoder)
    again = DenseRetriever.cached(remote, counting, root)
    assert counting.texts == [] and again.describe()["passages"] == 23
