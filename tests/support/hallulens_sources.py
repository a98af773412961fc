"""Small HalluLens sources of the real formats, and a generator that answers from the prompt,
shared by the unit and integration tests."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from halluscope.contract.completion import Completion

# Small bins: h in (-2, 10] is bin 0, (10, 20] bin 1, ..., (90, 100] bin 9.
EDGES = [-2.0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
FILLER = ("Its records were kept in a stone archive near the river. Scholars visited the archive every "
          "spring for many years. The collection grew slowly over three centuries of careful work. "
          "Later surveys confirmed most of the older measurements.")
PREFIX = {3: "Hard", 6: "Brief", 8: "Bare"}  # pages the fake generator cannot use (see fake_generate)


def page_doc(title: str, pageid: int) -> str:
    """A lead and three sections (the last is dropped): each 7 + 37 = 44 words with a fact to ask about."""
    parts = []
    for k, name in enumerate(["lead", "History", "Legacy", "Notes"]):
        code = f"K{pageid}x{k}"
        if title.startswith("Wordy"):
            code = "a very long answer that runs to twelve words in all"
        body = f"The code of {title} {name} is {code}. {FILLER}"
        parts.append(body if name == "lead" else f"## {name}\n\n{body}")
    return "\n\n".join(parts)


def pages_and_scores() -> tuple[list[dict], list[tuple[str, float]]]:
    rows, scores = [], []
    for b in range(10):
        for j in range(3):
            pageid = 1000 + 10 * b + j
            title = f"{PREFIX.get(b, 'Page')} {b}-{j}"
            if (b, j) == (7, 0):
                title = "Wordy 7-0"
            doc = "A stub page. It is short." if (b, j) == (5, 2) else page_doc(title, pageid)
            rows.append({"pageid": pageid, "title": title, "revid": pageid * 7, "description": f"Page {pageid}",
                         "categories": [f"Bin {b}"], "markdown": doc})
            scores.append((title, 10.0 * b + 5))
    # no WikiRank score: h = -1, bin 0; a score above the last edge: outside every bin
    rows.append({"pageid": 999, "title": "Unranked", "revid": 1, "description": None, "categories": [],
                 "markdown": page_doc("Unranked", 999)})
    rows.append({"pageid": 998, "title": "Outlier", "revid": 1, "description": None, "categories": [],
                 "markdown": page_doc("Outlier", 998)})
    scores.append(("Outlier", 150.0))
    return rows, scores


def write_wiki_sources(folder: Path) -> tuple[Path, Path, Path]:
    """GoodWiki Parquet, WikiRank titles and scores files of ``pages_and_scores``."""
    rows, scores = pages_and_scores()
    pq.write_table(pa.Table.from_pylist(rows), folder / "goodwiki.parquet")
    (folder / "enwiki-2024.titles").write_text("".join(f"{t}\n" for t, _ in scores))
    (folder / "enwiki-2024-h.txt").write_text("".join(f"{h}\n" for _, h in scores))
    return folder / "goodwiki.parquet", folder / "enwiki-2024.titles", folder / "enwiki-2024-h.txt"


class FakeGenerator:
    """Answers from the prompt, like a careful model: a question about the section's "code" fact, and
    the code as the answer. It cannot answer about "Hard" pages, writes no essay question for "Bare"
    pages and gives two-sentence essays for "Brief" pages. Counts its batched calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, prompts: list[str]) -> list[Completion]:
        self.calls.append(len(prompts))
        return [Completion(text=self.reply(p)) for p in prompts]

    @staticmethod
    def reply(prompt: str) -> str:
        reference = re.search(r"Reference:\n(.*?)\n\n(?:Question|Reply)", prompt, re.S).group(1)
        if "\nTitle: " in prompt:  # question writing
            subject = re.search(r"The code of (.+?) is ", reference).group(1)
            if "essay" in prompt:
                return "[NO QUESTION]" if subject.startswith("Bare") else f"Question: Describe the code of {subject}."
            return f'"What is the code of {subject}?"'
        question = re.search(r"Question: (.*)", prompt).group(1)
        subject = re.search(r"code of (.+?)[?.]$", question).group(1)
        if subject.startswith("Hard"):
            return "unanswerable"
        code = re.search(rf"The code of {re.escape(subject)} is (.+?)\. ", reference).group(1)
        if question.startswith("Describe"):
            sentences = [f"The code is {code}."] + [s.rstrip(".") + "." for s in FILLER.split(". ")]
            return " ".join(sentences[:2] if subject.startswith("Brief") else sentences)  # 2 or 5 sentences
        return code


# (TSN path, name). Animalia: family Felidae with genera Felis, Panthera, Lynx and the childless
# Acinonyx; Canidae's only genus Canis (no sibling genus to borrow). Plantae: Rosa, Prunus.
# Bacteria: Escherichia, Salmonella, plus a three-word strain name.
TREE = [
    ("202423", "Animalia"), ("202423-110", "Felidae"),
    ("202423-110-111", "Felis"), ("202423-110-111-1111", "Felis catus"), ("202423-110-111-1112", "Felis silvestris"),
    ("202423-110-112", "Panthera"), ("202423-110-112-1121", "Panthera leo"), ("202423-110-112-1122", "Panthera catus"),
    ("202423-110-113", "Lynx"), ("202423-110-113-1131", "Lynx rufus"),
    ("202423-110-114", "Acinonyx"),
    ("202423-120", "Canidae"), ("202423-120-121", "Canis"), ("202423-120-121-1211", "Canis lupus"),
    ("202422", "Plantae"), ("202422-200", "Rosaceae"),
    ("202422-200-201", "Rosa"), ("202422-200-201-2011", "Rosa canina"), ("202422-200-201-2012", "Rosa rubiginosa"),
    ("202422-200-202", "Prunus"), ("202422-200-202-2021", "Prunus avium"), ("202422-200-202-2022", "Prunus canina"),
    ("50", "Bacteria"), ("50-300", "Enterobacteriaceae"),
    ("50-300-301", "Escherichia"), ("50-300-301-3011", "Escherichia coli"), ("50-300-301-3012", "Escherichia coli K12"),
    ("50-300-302", "Salmonella"), ("50-300-302-3021", "Salmonella enterica"), ("50-300-302-3022", "Salmonella coli"),
]
EXTRA_NAMES = [(9001, "Lynx leo")]  # in longnames but not in the hierarchy (e.g. a synonym)

# Every name a genus swap can make, worked out by hand, and those of them that are new:
#   Felis catus -> Panthera catus (exists), Lynx catus; Felis silvestris -> Panthera/Lynx silvestris;
#   Panthera leo -> Felis leo, Lynx leo (exists); Panthera catus -> Felis catus (exists), Lynx catus;
#   Lynx rufus -> Felis rufus, Panthera rufus.
NEW_ANIMALS = {"Lynx catus", "Panthera silvestris", "Lynx silvestris", "Felis leo", "Felis rufus", "Panthera rufus"}
NEW_PLANTS = {"Prunus rubiginosa", "Rosa avium"}  # Rosa canina <-> Prunus canina both exist
NEW_BACTERIA = {"Escherichia enterica"}  # Escherichia coli <-> Salmonella coli both exist

MEDICINE_CSV = """id,name,substitute0,substitute1,substitute2,substitute3,substitute4,use0
1,Augmentin 625 Duo Tablet,Moxikind-CV 625 Tablet,,,,,Infection
2,Azithral 500 Tablet,Azee 500 Tablet,,,,,Infection
3,Ascoril LS Syrup,Ambrodil-LX Syrup,,,,,Cough
4,Allegra 120mg Tablet,,,,,,Allergy
5,Avil 25 Tablet,,,,,,Allergy
6,"Calpol, Paracetamol",,,,,,Fever
7,Betadine 10% Ointment,,,,,,Wound
8,Pan D Capsule PR,,,,,,Acidity
"""
# Cleaned names (lower case, words with digits dropped): two-word ones give position pools
# {moxikind-cv, azithral, azee, ambrodil-lx, allegra, avil, betadine} x {tablet, syrup, ointment}: 21 names,
# 7 existing; three-word ones {augmentin, ascoril} x {duo, ls} x {tablet, syrup}: 8 names, 2 existing.
EXISTING_MEDICINES = {"moxikind-cv tablet", "azithral tablet", "azee tablet", "ambrodil-lx syrup", "allegra tablet",
                      "avil tablet", "betadine ointment", "augmentin duo tablet", "ascoril ls syrup"}


def write_tables(folder: Path) -> tuple[Path, Path, Path]:
    """ITIS hierarchy and longnames tables of ``TREE`` and the medicine table."""
    hierarchy = "".join(f"{path}|{path.rsplit('-', 1)[-1]}|0|0|0\n" for path, _ in TREE)
    longnames = "".join(f"{path.rsplit('-', 1)[-1]}|{name}\n" for path, name in TREE) + \
        "".join(f"{tsn}|{name}\n" for tsn, name in EXTRA_NAMES)
    (folder / "hierarchy").write_text(hierarchy)
    (folder / "longnames").write_bytes(longnames.encode("iso-8859-1"))
    (folder / "medicine_dataset.csv").write_text(MEDICINE_CSV)
    return folder / "hierarchy", folder / "longnames", folder / "medicine_dataset.csv"
