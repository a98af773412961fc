"""LongWiki evaluation steps: sentences, snippets, entities, candidate pages, dense evidence (real
MiniLM encoder over articles written here) and the batched judge steps with a deterministic fake judge."""

import json
import re

import pytest

from halluscope.contract.completion import Completion
from halluscope.contract.task import Item
from halluscope.errors import ConfigError, RunError
from halluscope.hallulens import longwiki as lw
from halluscope.hallulens import metrics
from halluscope.hallulens.judging import SENTENCE_END, SENTENCE_START
from halluscope.hallulens.tasks import LongWiki
from halluscope.knowledge.passages import ArticleStore
from halluscope.knowledge.retrieval import DenseRetriever, Encoder

WORDS = 60  # passage budget of the test store: each paragraph below is one passage
ARTICLES = {
    "Cyclone Bejisa": [
        "Cyclone Bejisa formed in the south-west Indian Ocean in late December 2013 from a zone of disturbed weather "
        "near the Agaléga islands. The storm intensified quickly over warm waters and was classified as an intense "
        "tropical cyclone by Météo-France within two days of forming.",
        "On 2 January 2014 the centre of Bejisa passed about 100 kilometres west of Réunion. Gusts of 180 kilometres "
        "per hour uprooted trees and cut electricity to about 140,000 homes on the island, and one person died.",
        "Farmers on Réunion lost much of the year's crops; damage to sugar cane, fruit orchards and greenhouses was "
        "estimated at 40 million euros. The French government declared a state of natural disaster for the island's "
        "agricultural sector.",
        "Before and after its approach to Réunion, Bejisa brought heavy rain to Mauritius, where schools were closed "
        "and flights were cancelled. The cyclone then weakened over cooler water and dissipated south of Madagascar.",
    ],
    "Réunion": [
        "Réunion is an island in the Indian Ocean east of Madagascar. It is an overseas department and region of "
        "France. The island is about 63 kilometres long, and its capital and largest city is Saint-Denis.",
        "Piton de la Fournaise, a shield volcano on the eastern end of the island, is one of the most active "
        "volcanoes in the world. Piton des Neiges, an extinct volcano, is the island's highest point at 3,070 metres.",
        "Sugar cane has long been the island's main crop, and rum and sugar make up most of its exports. Tourism, "
        "drawn by the volcano, the cirques and the lagoons, is a growing part of the economy of the island.",
    ],
    "Réunion National Park": [
        "Réunion National Park was created in 2007 and covers about 40 percent of the island of Réunion, including "
        "the high mountain cirques and the forests around the volcanoes. Parts of it are a UNESCO World Heritage Site.",
    ],
    "Sitti Nurbaya": [
        "Sitti Nurbaya is an Indonesian novel by Marah Rusli, published by Balai Pustaka in 1922. It tells of two "
        "young lovers, Samsulbahri and Nurbaya, whose love is thwarted when Nurbaya marries an older man to save her "
        "father from debt.",
        "Datuk Meringgih, the antagonist of the novel, is a wealthy and greedy merchant from Padang. He lends money "
        "to the father of Nurbaya and then ruins his business, so that Nurbaya must marry him to pay the debt.",
        "The novel is set in Padang and Batavia, and it is regarded as one of the most important works of modern "
        "Indonesian literature. It has been adapted as a television series and is taught in Indonesian schools.",
    ],
    "Marah Rusli": [
        "Marah Rusli was an Indonesian writer born in Padang in 1889. He trained as a veterinarian in Bogor and "
        "worked as a veterinary doctor for most of his life, writing novels in his spare time.",
        "Besides Sitti Nurbaya, Marah Rusli wrote the novels La Hami and Anak dan Kemenakan. He died in Bandung in "
        "1968 and was buried in Bogor, where he had studied as a young man.",
    ],
}
BEJISA_Q = "Describe the effects of Cyclone Bejisa on the island of Réunion."
NURBAYA_Q = "What are the characteristics of Datuk Meringgih in the story Sitti Nurbaya?"
RUSLI_Q = "Describe the life of Marah Rusli, the author of Sitti Nurbaya."

# (topic, question, claim, title and paragraph of the passage that holds the claim's fact)
CLAIMS = [
    ("Cyclone Bejisa", BEJISA_Q, "Bejisa cut electricity to about 140,000 homes on Réunion.", "Cyclone Bejisa", 1),
    ("Cyclone Bejisa", BEJISA_Q, "Damage to sugar cane and orchards on Réunion was estimated at 40 million euros.",
     "Cyclone Bejisa", 2),
    ("Cyclone Bejisa", BEJISA_Q, "Piton de la Fournaise is one of the most active volcanoes in the world.",
     "Réunion", 1),
    ("Cyclone Bejisa", BEJISA_Q, "Bejisa formed in late December 2013 near the Agaléga islands.", "Cyclone Bejisa", 0),
    ("Cyclone Bejisa", BEJISA_Q, "Schools in Mauritius were closed because of Bejisa's heavy rain.",
     "Cyclone Bejisa", 3),
    ("Cyclone Bejisa", BEJISA_Q, "The capital of Réunion is Saint-Denis.", "Réunion", 0),
    ("Cyclone Bejisa", BEJISA_Q, "Réunion National Park covers about 40 percent of the island.",
     "Réunion National Park", 0),
    ("Sitti Nurbaya", NURBAYA_Q, "Datuk Meringgih is a greedy merchant from Padang.", "Sitti Nurbaya", 1),
    ("Sitti Nurbaya", NURBAYA_Q, "Sitti Nurbaya was published by Balai Pustaka in 1922.", "Sitti Nurbaya", 0),
    ("Marah Rusli", RUSLI_Q, "Marah Rusli trained as a veterinarian in Bogor.", "Marah Rusli", 0),
]


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    path = tmp_path_factory.mktemp("wiki") / "articles.jsonl"
    path.write_text("".join(json.dumps({"title": t, "text": "\n\n".join(ps)}) + "\n" for t, ps in ARTICLES.items()))
    store = ArticleStore.load(str(path), max_words=WORDS)
    assert [len(store.articles[t]) for t in ARTICLES] == [len(ps) for ps in ARTICLES.values()]
    return DenseRetriever.build(store, Encoder(batch_size=32))


@pytest.fixture(scope="module")
def finder(retriever):
    return lw.EvidenceFinder(retriever, lw.LongWikiOptions(passage_words=WORDS))


# --- sentences, snippets, entities ---------------------------------------------------------------

SENTENCES = [
    ("Bejisa hit Réunion. It was strong! Was it? Yes.", ["Bejisa hit Réunion.", "It was strong!", "Was it?", "Yes."]),
    ("Dr. Smith met J. R. R. Tolkien in 1950. They talked.",
     ["Dr. Smith met J. R. R. Tolkien in 1950.", "They talked."]),
    ("It cost 3.5 million euros, e.g. for roads. Then it ended.",
     ["It cost 3.5 million euros, e.g. for roads.", "Then it ended."]),
    ("The storm hit St. Denis on 2 Jan. 2014 at night.", ["The storm hit St. Denis on 2 Jan. 2014 at night."]),
    ('He said "It is over." Then he left.', ['He said "It is over."', "Then he left."]),
    ("## Effects\n- Power cuts hit 140,000 homes.\n- One person died.\n\n1. Crops were lost.",
     ["Effects", "Power cuts hit 140,000 homes.", "One person died.", "Crops were lost."]),
    ("The damage (about 40 million euros.) was large.", ["The damage (about 40 million euros.) was large."]),
    ("", []),
]


@pytest.mark.parametrize("text,expected", SENTENCES)
def test_split_sentences(text, expected):
    assert lw.split_sentences(text) == expected


def test_snippets_mark_each_sentence_with_three_before_and_one_after():
    text = "One is here. Two is here. Ok. Three is here. Four is here. Five is here."
    snippets = lw.extraction_snippets(text)
    assert len(snippets) == 5  # "Ok." is shorter than 5 characters: skipped, also as context
    assert snippets[0] == f"{SENTENCE_START}One is here.{SENTENCE_END} Two is here."
    assert snippets[4] == f"Two is here. Three is here. Four is here. {SENTENCE_START}Five is here.{SENTENCE_END}"
    narrow = lw.extraction_snippets(text, lw.LongWikiOptions(context_before=1, context_after=0))
    assert narrow[4] == f"Four is here. {SENTENCE_START}Five is here.{SENTENCE_END}"
    prompts = lw.extraction_prompts(text)
    assert len(prompts) == 5 and prompts[1].endswith(f"Text: {snippets[1]}\nClaims:")


ENTITIES = [
    (NURBAYA_Q, ["Datuk Meringgih", "Sitti Nurbaya"]),
    (BEJISA_Q, ["Cyclone Bejisa", "Réunion"]),
    ("Who relieved General Douglas MacArthur in April 1951?", ["General Douglas MacArthur"]),
    ('Who played flute on "Living in the Material World" by George Harrison?',
     ["Living in the Material World", "George Harrison"]),
    ("How did Martin Van Buren become Vice President?", ["Martin Van Buren", "Vice President"]),
    ("What did Neil Armstrong do after retiring from NASA?", ["Neil Armstrong", "NASA"]),
    ("Explain the role of the Bank of England in the Apollo 11 mission's funding.", ["Bank of England", "Apollo 11"]),
    ("Describe Japan's flag.", ["Japan"]),
    ("what happened next?", []),
]


@pytest.mark.parametrize("question,expected", ENTITIES)
def test_prompt_entities(question, expected):
    assert lw.prompt_entities(question) == expected


def test_candidate_pages():
    pages = lw.PageIndex(ARTICLES)
    entities = lw.prompt_entities(BEJISA_Q)
    assert lw.candidate_pages("Cyclone Bejisa", BEJISA_Q, "Bejisa hit Réunion.", pages, entities) == \
        ["Cyclone Bejisa", "Réunion"]
    # a title containing an entity is searched only when it occurs in the claim (or the question)
    claim = "The storm spared Réunion National Park."
    assert lw.candidate_pages("cyclone  bejisa", BEJISA_Q, claim, pages, entities) == \
        ["Cyclone Bejisa", "Réunion", "Réunion National Park"]
    # a topic missing from the store is skipped; entity titles still count
    assert lw.candidate_pages("Unknown Page", NURBAYA_Q, "x", pages, lw.prompt_entities(NURBAYA_Q)) == ["Sitti Nurbaya"]
    assert pages.containing("") == [] and pages.resolve("RÉUNION") == "Réunion"


# --- evidence ------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic,question,claim,title,paragraph", CLAIMS)
def test_the_passage_holding_the_fact_ranks_first(finder, topic, question, claim, title, paragraph):
    [evidence] = finder.find(topic, question, [claim])
    assert 1 <= len(evidence) <= 5
    assert (evidence[0].title, evidence[0].text) == (title, ARTICLES[title][paragraph])
    assert [p.score for p in evidence] == sorted((p.score for p in evidence), reverse=True)


def test_evidence_is_restricted_to_candidate_pages(finder):
    # Marah Rusli is neither the topic nor named in the question: his page is not searched
    [evidence] = finder.find("Sitti Nurbaya", NURBAYA_Q, ["Marah Rusli trained as a veterinarian in Bogor."])
    assert {p.title for p in evidence} == {"Sitti Nurbaya"} and len(evidence) == 3  # all it has (< top 5)
    assert finder.find("Nowhere", "what is it?", ["a claim", "another"]) == [[], []]


def test_evidence_pools_top_five_over_pages(finder):
    [evidence] = finder.find("Cyclone Bejisa", BEJISA_Q, ["Bejisa brought heavy rain to Mauritius."])
    assert len(evidence) == 5 and {p.title for p in evidence} <= {"Cyclone Bejisa", "Réunion"}


def test_finder_checks_the_passage_budget(retriever):
    with pytest.raises(ConfigError, match="passages of 60 words, but LongWiki is configured for 256"):
        lw.EvidenceFinder(retriever)


# --- the batched steps with a fake judge ---------------------------------------------------------

_MARKED = re.compile(re.escape(SENTENCE_START) + "(.*?)" + re.escape(SENTENCE_END))
_REFUSALS = re.compile(r"couldn't find|don't have|no information", re.IGNORECASE)


def fake_judge(prompt: str) -> Completion:
    """Answers the three LongWiki prompts by simple rules; malformed on request ("GARBLE")."""
    if "is_knowledgeable" in prompt:
        generation = prompt.rsplit("\nChatbot: ", 1)[1]
        return Completion(json.dumps({"is_knowledgeable": not _REFUSALS.search(generation)}))
    if prompt.endswith("Claims:"):
        sentence = _MARKED.findall(prompt)[-1]
        if "GARBLE" in sentence:
            return Completion("Sure thing! Happy to help.")
        if "FAIL" in sentence:
            return Completion(None, error="HTTP 503")
        if sentence.startswith("I think"):
            return Completion("No verifiable claim.")
        parts = [p.strip(" .") for p in re.split(r", and |, | and ", sentence)]
        return Completion("Here are the claims:\n" + "\n".join(f"- {p}." for p in parts if p))
    if "is_supported" in prompt:
        claim = re.search(r"^Claim: (.*)$", prompt, re.MULTILINE).group(1)
        evidence = prompt.split("\nEvidence:\n", 1)[1].split("\nClaim: ", 1)[0].lower()
        words = [w for w in re.findall(r"\w+", claim.lower()) if len(w) > 3]
        return Completion(f'```json\n{{"is_supported": {str(all(w in evidence for w in words)).lower()}}}\n```')
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


ROWS = [  # (item id, bin, topic, question, generation)
    ("bejisa", 5, "Cyclone Bejisa", BEJISA_Q,
     "Cyclone Bejisa passed west of Réunion in January 2014. Bejisa cut electricity to 140,000 homes, and "
     "Bejisa destroyed the airport of Saint-Denis. I think it was a frightening storm."),
    ("refusal", 6, "Sitti Nurbaya", NURBAYA_Q, "I'm sorry, but I couldn't find any information about that story."),
    ("garbled", 7, "Sitti Nurbaya", NURBAYA_Q, "Datuk Meringgih is a merchant from Padang. GARBLE this sentence."),
    ("opinion", 8, "Marah Rusli", RUSLI_Q, "I think he was a wonderful writer."),
    ("nurbaya", 9, "Sitti Nurbaya", NURBAYA_Q, "Datuk Meringgih is a greedy merchant from Padang. Datuk Meringgih "
     "was a famous painter."),
]


def test_batched_steps_end_to_end(finder):
    # step 0: every row's refusal prompt in one batch
    refusals = [lw.read_refusal(fake_judge(lw.refusal_prompt(q, g))) for _, _, _, q, g in ROWS]
    assert refusals == [False, True, False, False, False]
    answered = [row for row, refused in zip(ROWS, refusals) if not refused]

    # step 1: one extraction prompt per sentence of each answered row
    extraction = [lw.extraction_prompts(g) for *_, g in answered]
    assert [len(p) for p in extraction] == [3, 2, 1, 2]
    claims = {row[0]: lw.read_claims([fake_judge(p) for p in prompts]) for row, prompts in zip(answered, extraction)}
    assert claims["bejisa"].claims == ["Cyclone Bejisa passed west of Réunion in January 2014.",
                                       "Bejisa cut electricity to 140,000 homes.",
                                       "Bejisa destroyed the airport of Saint-Denis."]
    assert claims["bejisa"].error is None and claims["opinion"].claims == [] and claims["opinion"].error is None
    assert claims["garbled"].n_unreadable == 1
    assert "unreadable answer 'Sure thing! Happy to help.'" in claims["garbled"].error

    # steps 2-3: evidence, then the verification prompts of the rows with usable claims
    to_verify = [row for row in answered if claims[row[0]].error is None and claims[row[0]].claims]
    evidence = {item: finder.find(topic, q, claims[item].claims) for item, _, topic, q, _ in to_verify}
    verification = {item: lw.verification_prompts(claims[item].claims, evidence[item]) for item, *_ in to_verify}
    assert [len(p) for p in verification.values()] == [3, 2]
    verdicts = {item: lw.read_verdicts(claims[item].claims, evidence[item], [fake_judge(p) for p in prompts])
                for item, prompts in verification.items()}
    assert [v.supported for v in verdicts["bejisa"]] == [True, True, False]  # no airport in the passages
    assert [v.supported for v in verdicts["nurbaya"]] == [True, False]  # not a painter
    assert verdicts["bejisa"][1].evidence.startswith("pages: Cyclone Bejisa")

    # step 4: the rows as the metrics read them (an extraction error makes an error row)
    def row_of(item, b, refused):
        c, v = claims.get(item), verdicts.get(item, ())
        return metrics.LongFormJudged(item, refused, len(c.claims) if c else 0,
                                      sum(x.supported is True for x in v), sum(x.supported is None for x in v), b,
                                      c.error if c else None)

    judged = [row_of(item, b, refused) for (item, b, *_), refused in zip(ROWS, refusals)]
    assert [(j.refused, j.n_claims, j.n_supported, j.error is not None) for j in judged] == \
        [(False, 3, 2, False), (True, 0, 0, False), (False, 1, 0, True), (False, 0, 0, False), (False, 2, 1, False)]
    m = metrics.longwiki(judged, k=4)
    # scored: bejisa, refusal, opinion (no claim: a refusal), nurbaya; garbled is an error row
    assert (m["n_scored"], m["n_errors"], m["n_refused"], m["n_answered"]) == (4, 1, 2, 2)
    # bejisa P 2/3, R 2/4; nurbaya P 1/2, R 1/4
    assert m["precision"] == pytest.approx((2 / 3 + 1 / 2) / 2) and m["recall_at_k"] == pytest.approx((0.5 + 0.25) / 2)


def test_verdicts_without_evidence_failed_or_unreadable_are_unverified():
    passage = lw.Passage("Réunion", "An island.", 0.9)
    claims = ["a", "b", "c", "d"]
    evidence = [[passage], [], [passage], [passage]]
    prompts = lw.verification_prompts(claims, evidence)
    assert len(prompts) == 3 and "\nClaim: c\n" in prompts[1]
    replies = [Completion('{"is_supported": true}'), Completion(None, error="timeout"), Completion("Perhaps.")]
    verdicts = lw.read_verdicts(claims, evidence, replies)
    assert [v.supported for v in verdicts] == [True, None, None, None]
    assert verdicts[1].evidence.startswith("no evidence passage")
    assert verdicts[2].evidence == "verifier call failed: timeout"
    assert verdicts[3].evidence == "verifier unreadable answer 'Perhaps.'"
    with pytest.raises(RunError, match="2 replies for 3 prompts"):
        lw.read_verdicts(claims, evidence, replies[:2])


def test_evidence_order_in_the_prompt_is_reversed():
    best, second = lw.Passage("A", "best passage", 0.9), lw.Passage("B", "second passage", 0.5)
    [prompt] = lw.verification_prompts(["claim"], [[best, second]])
    assert prompt.index("second passage") < prompt.index("best passage") < prompt.index("Claim: claim")


def test_claims_are_deduplicated_across_sentences_and_failures_counted():
    replies = [Completion("- A fact.\n- B fact."), Completion("- B fact.\n- C fact."),
               Completion(None, error="HTTP 429")]
    c = lw.read_claims(replies)
    assert c.claims == ["A fact.", "B fact.", "C fact."]
    assert (c.n_sentences, c.n_failed, c.n_unreadable) == (3, 1, 0)
    assert c.error == "claim extraction: 1 failed and 0 unreadable of 3 sentences; first: call failed: HTTP 429"
    with pytest.raises(ValueError) as err:  # the task fails the row with the same message
        LongWiki().decompose("", Item("hallulens/longwiki", "x", "q"), replies)
    assert str(err.value) == c.error



def test_claims_reach_the_verifier_as_the_extractor_wrote_them():
    # an extractor's answers for two sentences of a generation about programming languages
    replies = [Completion("- C# was released by Microsoft in 2000; Anders Hejlsberg led its design.\n"
                          "- Python functions are named in snake_case by convention."),
               Completion("- C# was released by Microsoft in 2000; Anders Hejlsberg led its design.\n"
                          "- c# was released by microsoft in 2000; anders hejlsberg led its design.\n"
                          "- The `print` function is a built-in of Python 3.")]
    c = lw.read_claims(replies)
    assert c.claims == ["C# was released by Microsoft in 2000; Anders Hejlsberg led its design.",
                        "Python functions are named in snake_case by convention.",
                        "c# was released by microsoft in 2000; anders hejlsberg led its design.",
                        "The `print` function is a built-in of Python 3."]  # exact duplicates only merged
    evidence = [[lw.Passage("C Sharp (programming language)", "C# is a language by Microsoft.", 0.8)]] * len(c.claims)
    prompts = lw.verification_prompts(c.claims, evidence)
    assert [re.search(r"Claim: (.*)\n", p).group(1) for p in prompts] == c.claims


def test_a_failed_refusal_call_is_unreadable():
    assert lw.read_refusal(Completion(None, error="down")) is None
