"""HalluLens source readers (GoodWiki, WikiRank, ITIS, medicines) on small files of the real formats,
and the section and sentence splitting that question generation relies on."""

from __future__ import annotations

import gzip
import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from halluscope.errors import DataError
from halluscope.hallulens.sections import count_sentences, split_sections, split_sentences, words
from halluscope.hallulens.sources import load_goodwiki, load_harmonic_centrality, load_itis, load_medicines, title_key

GOODWIKI_ROWS = [
    {"pageid": 40961074, "title": "Attarsiya", "revid": 1164804042, "description": "Military leader of Ahhiya",
     "categories": ["Ancient Anatolia", "Mycenaean Greeks"],
     "markdown": "Attarsiya was a leader.\n\n## Campaigns\n\nHe fought."},
    {"pageid": 2, "title": "Beryl May Dent", "revid": None, "description": None, "categories": [],
     "markdown": "Beryl May Dent was a physicist."},
    {"pageid": 3, "title": "  ", "revid": 1, "description": None, "categories": [], "markdown": "No title."},
    {"pageid": 4, "title": "Empty", "revid": 1, "description": None, "categories": [], "markdown": "   "},
    {"pageid": 2, "title": "Duplicate id", "revid": 1, "description": None, "categories": [], "markdown": "Text."},
]


def write_parquet(path, rows, text_column="markdown"):
    renamed = [{(text_column if k == "markdown" else k): v for k, v in r.items()} for r in rows]
    pq.write_table(pa.Table.from_pylist(renamed), path)
    return path


def test_goodwiki_parquet_counts_bad_rows(tmp_path):
    ps = load_goodwiki(str(write_parquet(tmp_path / "goodwiki.parquet", GOODWIKI_ROWS)))
    assert [p.title for p in ps.pages] == ["Attarsiya", "Beryl May Dent"]
    first = ps.pages[0]
    assert (first.pageid, first.revid) == (40961074, 1164804042)
    assert first.categories == ("Ancient Anatolia", "Mycenaean Greeks")
    assert ps.pages[1].revid is None and ps.pages[1].description is None
    # rows 3, 4 and 5 (1-based): blank title, blank text, repeated pageid
    assert ps.report.rows == 5 and ps.report.kept == 2
    assert [row for row, _ in ps.report.examples] == [3, 4, 5]
    assert sum(ps.report.skipped.values()) == 3
    assert any("duplicate pageid 2" in reason for reason in ps.report.skipped)
    assert ps.refs[0].sha256 == hashlib.sha256((tmp_path / "goodwiki.parquet").read_bytes()).hexdigest()


def test_goodwiki_document_column_and_gzipped_jsonl(tmp_path):
    ps = load_goodwiki(str(write_parquet(tmp_path / "renamed.parquet", GOODWIKI_ROWS[:1], "document")))
    assert ps.pages[0].document.startswith("Attarsiya was")
    lines = [json.dumps(GOODWIKI_ROWS[1]), "{not json", json.dumps(["a", "list"]), json.dumps(GOODWIKI_ROWS[0])]
    path = tmp_path / "goodwiki.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    ps = load_goodwiki(str(path))
    assert [p.pageid for p in ps.pages] == [2, 40961074]
    assert [row for row, _ in ps.report.examples] == [2, 3]  # line numbers of the two bad lines


def test_goodwiki_errors_name_the_file(tmp_path):
    pq.write_table(pa.table({"pageid": [1], "title": ["T"], "text": ["x"]}), tmp_path / "wrong.parquet")
    with pytest.raises(DataError, match=r"wrong\.parquet has no column markdown \(or document\)"):
        load_goodwiki(str(tmp_path / "wrong.parquet"))
    with pytest.raises(DataError, match="GoodWiki file not found: .*missing.parquet"):
        load_goodwiki(str(tmp_path / "missing.parquet"))
    with pytest.raises(DataError, match=r"cannot tell the format .*pages\.csv"):
        (tmp_path / "pages.csv").write_text("x")
        load_goodwiki(str(tmp_path / "pages.csv"))
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    with pytest.raises(DataError, match=r"no usable GoodWiki page in .*bad\.jsonl"):
        load_goodwiki(str(tmp_path / "bad.jsonl"))


def test_wikirank_line_aligned_files(tmp_path):
    (tmp_path / "enwiki-2024.titles").write_text("Attarsiya\nBeryl_May_Dent\nBroken\n\nAttarsiya\nOther\n")
    (tmp_path / "enwiki-2024-h.txt").write_text("1500000.5\n1400000\nnot-a-number\n5\n7\ninf\n")
    scores = load_harmonic_centrality(str(tmp_path / "enwiki-2024.titles"), str(tmp_path / "enwiki-2024-h.txt"))
    assert scores.scores == {"Attarsiya": 1500000.5, "Beryl May Dent": 1400000.0}
    assert scores.get("Beryl May Dent") == 1400000.0 and scores.get("Unknown") is None
    # line 3 bad score, line 4 empty title, line 5 repeated title, line 6 non-finite score
    assert sorted(scores.report.examples) == [(3, "unparseable score"), (4, "missing title"),
                                              (5, "duplicate title"), (6, "non-finite score")]
    only = load_harmonic_centrality(str(tmp_path / "enwiki-2024.titles"), str(tmp_path / "enwiki-2024-h.txt"),
                                    only=["Attarsiya"])
    assert only.scores == {"Attarsiya": 1500000.5}


def test_wikirank_misaligned_files_are_an_error(tmp_path):
    (tmp_path / "t.titles").write_text("A\nB\n")
    (tmp_path / "h.txt").write_text("1\n")
    with pytest.raises(DataError, match=r"not line-aligned: .*t\.titles has 2 lines, .*h\.txt has 1"):
        load_harmonic_centrality(str(tmp_path / "t.titles"), str(tmp_path / "h.txt"))


def test_score_table_tsv_and_parquet(tmp_path):
    (tmp_path / "h.tsv").write_text("Attarsiya\t12.5\nTitle, with comma\t3\n")
    assert load_harmonic_centrality(str(tmp_path / "h.tsv")).scores == {"Attarsiya": 12.5, "Title, with comma": 3.0}
    pq.write_table(pa.table({"title": ["A", "B"], "score": [1.0, None]}), tmp_path / "h.parquet")
    table = load_harmonic_centrality(str(tmp_path / "h.parquet"))
    assert table.scores == {"A": 1.0} and table.report.examples == [(2, "unparseable score")]
    assert title_key("Beryl_May_Dent ") == "Beryl May Dent"


# hierarchy_string|TSN|Parent_TSN|level|ChildrenCount, as in the ITIS MySQL dump
ITIS_HIERARCHY = """202423|202423|0|0|1
202423-110|110|202423|1|2
202423-110-111|111|110|2|1
202423-110-111-1111|1111|111|3|0
202423-110-112|112|110|2|0
x-1|5|1|1|0
"""
ITIS_LONGNAMES = "202423|Animalia\n110|Felidae\n111|Felis\n1111|Felis catus\n112|Panthera\nabc|Bad\n999|Lynx l\xe9o\n"


def test_itis_tree_and_known_names(tmp_path):
    (tmp_path / "hierarchy").write_text(ITIS_HIERARCHY)
    (tmp_path / "longnames").write_bytes(ITIS_LONGNAMES.encode("iso-8859-1"))
    tax = load_itis(str(tmp_path / "hierarchy"), str(tmp_path / "longnames"))
    assert tax.parent == {110: 202423, 111: 110, 1111: 111, 112: 110}
    assert tax.children == {202423: [110], 110: [111, 112], 111: [1111]}
    assert set(tax.kingdom.values()) == {202423}
    assert "lynx léo" in tax.known_names and "felis catus" in tax.known_names  # ISO-8859-1 decoded
    assert tax.report.skipped == {f"{tmp_path}/longnames: non-integer TSN": 1,
                                  f"{tmp_path}/hierarchy: hierarchy_string is not a dash-separated TSN path": 1}


MEDICINE_CSV = """id,name,substitute0,substitute1,substitute2,substitute3,substitute4,use0
1,Augmentin 625 Duo Tablet,Moxikind-CV 625 Tablet,,,,,Infection
2,,Azee 500 Tablet,,,,,Infection
3,"Calpol, Paracetamol",,,,,,"Fever,
pain"
"""


def test_medicine_table(tmp_path):
    (tmp_path / "medicine_dataset.csv").write_text(MEDICINE_CSV)
    med = load_medicines(str(tmp_path / "medicine_dataset.csv"))
    assert med.names == ["Augmentin 625 Duo Tablet", "Moxikind-CV 625 Tablet", "Calpol, Paracetamol"]
    assert med.report.rows == 3 and med.report.examples == [(3, "missing name")]
    (tmp_path / "no_name.csv").write_text("id,title\n1,x\n")
    with pytest.raises(DataError, match=r"no_name\.csv has no column 'name' \(header: id, title\)"):
        load_medicines(str(tmp_path / "no_name.csv"))


def test_sources_from_s3(s3_endpoint, bucket, tmp_path):
    import boto3

    write_parquet(tmp_path / "gw.parquet", GOODWIKI_ROWS[:2])
    boto3.client("s3", endpoint_url=s3_endpoint).upload_file(str(tmp_path / "gw.parquet"), bucket, "gw.parquet")
    ps = load_goodwiki(f"s3://{bucket}/gw.parquet", storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}})
    assert len(ps.pages) == 2 and ps.refs[0].url == f"s3://{bucket}/gw.parquet"


# --- sections -----------------------------------------------------------------------------------

def para(word: str, n: int) -> str:
    return " ".join([word] * n)


@pytest.mark.parametrize("doc, expected", [
    # lead, two sections and a last one: more than two sections, so the last is dropped
    (f"{para('a', 30)}\n\n## One\n\n{para('b', 30)}\n\n## Two\n\n{para('c', 30)}\n\n## Refs\n\n{para('r', 30)}",
     [30, 32, 32]),  # a heading adds 2 words ("##" and its title)
    # a short section (6 words incl. heading) merges into the one before it; an empty heading disappears
    (f"{para('a', 30)}\n\n## Short\n\n{para('s', 4)}\n\n## Empty\n\n## Two\n\n{para('c', 30)}",
     [36, 32]),
    # a section over the maximum (2 + 30 + 31 = 63 words) is cut into sentence-packed pieces of at
    # most 50 words: the heading paragraph with the first sentence, then the second sentence
    (f"## Long\n\n{'Word ' * 29}end. {'More ' * 30}end.", [32, 31]),
])
def test_split_sections(doc, expected):
    assert [words(s) for s in split_sections(doc, 20, 50)] == expected


@pytest.mark.parametrize("text, n", [
    ("Dr. Smith joined the U.S. Army in 1942. He met J. R. R. Tolkien there. It rained.", 3),
    ('"Stop!" she said. Then she left (quietly). The end', 3),
    ("No sentence end here", 1),
    ("One. Two. Three. Four.", 4),
    ("", 0),
])
def test_count_sentences(text, n):
    assert count_sentences(text) == n, split_sentences(text)
