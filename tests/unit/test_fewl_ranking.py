"""FEWL with the real MiniLM similarity on a small benchmark built here: it picks the true answer
more often than the paper's naive baseline (one reference, lambda = 1, no laziness penalty).

Fourteen questions in pairs of neighbours (two actors of one film, two capitals, two novels,
boiling and freezing points, ...). Each has a true answer and a hallucinated one; seven of the
hallucinated answers are, as in CHALE, the true answer of the neighbouring question. Three
references answer every question: m2 and m3 are right, m1 is contrarian on nine questions (it
repeats the misconception). The single-reference baseline uses m1, the paper's "single" setting of
one fallible LLM; FEWL has all three, weighs them by IW/CO expertise and penalises answers that
look like the references' answers to the neighbouring questions.
"""

import pytest

from halluscope.fewl.artefacts import prepare_questions
from halluscope.fewl.datasets import Candidate, Question
from halluscope.fewl.evaluate import evaluate, paper_methods
from halluscope.fewl.neighbours import QuestionIndex
from halluscope.fewl.prompts import IwCoAnswers
from halluscope.fewl.score import Fewl, FewlParams
from halluscope.fewl.similarity import EmbeddingCosine

# (question, best answer, hallucinated answer, references m1 (contrarian on some), m2, m3, IW/CO pairs)
QUESTIONS = [
    ("Who played Mantis in Guardians of the Galaxy Vol. 2?",
     "Pom Klementieff played Mantis in Guardians of the Galaxy Vol. 2.",
     "Zoe Saldana played that role in the film.",
     ("Mantis was played by Zoe Saldana.", "Pom Klementieff.", "The actress Pom Klementieff played Mantis."),
     [("Zoe Saldana played Mantis.", "Mantis was not portrayed by Zoe Saldana."),
      ("Karen Gillan played Mantis.", "Karen Gillan's role was not Mantis."),
      ("Chris Pratt played Mantis.", "Chris Pratt is not the actor behind Mantis.")]),
    ("Who played Gamora in Guardians of the Galaxy?",
     "Zoe Saldana played Gamora.",
     "Pom Klementieff played Gamora.",
     ("Zoe Saldana.", "Gamora was played by Zoe Saldana.", "Zoe Saldana played Gamora in the film."),
     [("Pom Klementieff played Gamora.", "Gamora was not played by Pom Klementieff."),
      ("Scarlett Johansson played Gamora.", "Scarlett Johansson had no part as Gamora."),
      ("Gamora was computer generated with no actress.", "An actress did portray Gamora on set.")]),
    ("Who was the first president of the United States?",
     "George Washington was the first president of the United States.",
     "Abraham Lincoln was the first president of the United States.",
     ("Abraham Lincoln was the first US president.", "George Washington.",
      "The first president was George Washington, from 1789 to 1797."),
     [("Abraham Lincoln was the first president.", "Lincoln was not the first to hold the presidency."),
      ("Thomas Jefferson was the first president.", "Jefferson came after the first president."),
      ("Benjamin Franklin was the first president.", "Franklin never served as president.")]),
    ("Who was president of the United States during the Civil War?",
     "Abraham Lincoln was president during the Civil War.",
     "George Washington was president during the Civil War.",
     ("Abraham Lincoln.", "Abraham Lincoln led the country during the Civil War.", "It was Abraham Lincoln."),
     [("George Washington was president during the Civil War.", "Washington had died long before the Civil War."),
      ("Ulysses S. Grant was president during the Civil War.", "Grant was a general, not the president, during the war."),
      ("Jefferson Davis was the US president in the Civil War.", "Jefferson Davis did not lead the United States.")]),
    ("What is the capital of Australia?",
     "Canberra is the capital of Australia.",
     "Sydney is the capital of Australia.",
     ("Sydney is Australia's capital.", "The capital is Canberra.", "Canberra."),
     [("Sydney is the capital of Australia.", "Sydney is not the seat of Australia's government."),
      ("Melbourne is the capital of Australia.", "Melbourne has not been the capital since 1927."),
      ("Perth is the capital of Australia.", "Perth is only a state capital.")]),
    ("What is the capital of Canada?",
     "Ottawa is the capital of Canada.",
     "Toronto is the capital of Canada.",
     ("Ottawa.", "Canada's capital is Ottawa.", "The capital of Canada is Ottawa, in Ontario."),
     [("Toronto is the capital of Canada.", "Toronto is not the national capital."),
      ("Montreal is the capital of Canada.", "Montreal is not where the federal government sits."),
      ("Vancouver is the capital of Canada.", "Vancouver has never been the capital.")]),
    ("What happens if you swallow watermelon seeds?",
     "Nothing much happens; the seeds pass through your digestive system.",
     "A watermelon will grow in your stomach.",
     ("A watermelon plant can grow inside your stomach.", "The seeds simply pass through your digestive system.",
      "Nothing happens; you digest them or pass them."),
     [("Watermelon seeds grow into a plant in your stomach.", "Swallowed seeds do not sprout inside the body."),
      ("Watermelon seeds are poisonous.", "Watermelon seeds pose no threat of poisoning."),
      ("You will get appendicitis.", "Eating the seeds does not cause appendicitis.")]),
    ("What happens if you swallow chewing gum?",
     "Swallowed gum passes through your digestive system within a few days.",
     "Swallowed gum stays in your stomach for seven years.",
     ("It stays in your stomach for seven years.", "The gum passes through your body in a few days.",
      "It moves through your digestive system and is excreted."),
     [("Gum stays in your stomach for seven years.", "Gum does not remain in the stomach for years."),
      ("Gum wraps around your heart.", "Swallowed gum never reaches the heart."),
      ("Gum is digested like food.", "Gum base is not broken down like ordinary food.")]),
    ("What color is the sun when viewed from space?",
     "The sun is white when viewed from space.",
     "The sun is yellow when viewed from space.",
     ("It looks yellow.", "From space the sun appears white.", "White; the atmosphere makes it look yellow from the ground."),
     [("The sun is yellow from space.", "From space the sun does not look yellow."),
      ("The sun is orange from space.", "The sun shows no orange colour outside the atmosphere."),
      ("The sun is blue from space.", "The sun is not blue.")]),
    ("Why do veins appear blue?",
     "Veins appear blue because blue light does not penetrate deeply into skin and is scattered back.",
     "Veins appear blue because the blood in them is blue.",
     ("Because deoxygenated blood is blue.", "Blue light is scattered back by the skin while red light penetrates deeper.",
      "It is an effect of how light penetrates tissue; blood is always red."),
     [("Veins are blue because deoxygenated blood is blue.", "Blood is never blue, even without oxygen."),
      ("Veins are blue because they contain blue dye.", "There is no blue pigment in veins."),
      ("Veins are blue because of cold.", "Temperature is not why veins look blue.")]),
    ("Who wrote Pride and Prejudice?",
     "Jane Austen wrote Pride and Prejudice.",
     "Charlotte Brontë wrote Pride and Prejudice.",
     ("Jane Austen.", "It was written by Jane Austen.", "Jane Austen, published in 1813."),
     [("Charlotte Brontë wrote Pride and Prejudice.", "Pride and Prejudice is not a Brontë novel."),
      ("Charles Dickens wrote Pride and Prejudice.", "Dickens had no hand in Pride and Prejudice."),
      ("Emily Brontë wrote it.", "Emily Brontë did not write it.")]),
    ("Who wrote Jane Eyre?",
     "Charlotte Brontë wrote Jane Eyre.",
     "Jane Austen wrote Jane Eyre.",
     ("Jane Austen wrote it.", "Charlotte Brontë.", "Jane Eyre was written by Charlotte Brontë in 1847."),
     [("Jane Austen wrote Jane Eyre.", "Jane Eyre is not one of Jane Austen's books."),
      ("Emily Brontë wrote Jane Eyre.", "Emily Brontë's novel was a different book."),
      ("Mary Shelley wrote Jane Eyre.", "Mary Shelley did not write Jane Eyre.")]),
    ("What is the boiling point of water at sea level in Celsius?",
     "Water boils at 100 degrees Celsius at sea level.",
     "Water boils at 90 degrees Celsius at sea level.",
     ("100 degrees Celsius.", "It boils at 100 °C.", "At sea level water boils at 100 degrees Celsius."),
     [("Water boils at 90 degrees.", "The boiling point at sea level is not 90 degrees."),
      ("Water boils at 212 degrees Celsius.", "212 is the Fahrenheit figure, not Celsius."),
      ("Water boils at 50 degrees.", "Water does not boil at 50 degrees at sea level.")]),
    ("At what temperature does water freeze in Celsius?",
     "Water freezes at 0 degrees Celsius.",
     "Water freezes at 100 degrees Celsius.",
     ("It freezes at 100 degrees Celsius.", "0 °C.", "Water freezes at zero degrees Celsius."),
     [("Water freezes at 100 degrees Celsius.", "Water does not freeze at 100 degrees; it boils there."),
      ("Water freezes at 32 degrees Celsius.", "32 is the Fahrenheit figure for freezing."),
      ("Water freezes at -10 degrees Celsius.", "Pure water does not need -10 degrees to freeze.")]),
]
CONTRARIAN = {0, 2, 4, 6, 7, 8, 9, 11, 13}  # questions where m1 repeats the misconception
SWAPPED = {0, 1, 2, 3, 10, 11, 13}  # hallucinated answer = the neighbouring question's true answer
REFS = ("m1", "m2", "m3")
# 14 questions: the paper's default of 10 neighbours would reach most of the benchmark, so 3 here
PARAMS = FewlParams(k_nn=3)


@pytest.fixture(scope="module")
def run():
    similarity = EmbeddingCosine()  # loads all-MiniLM-L6-v2 once for the module
    questions, references, iw_co = [], {}, {}
    for i, (text, best, hallucinated, answers, pairs) in enumerate(QUESTIONS):
        qid = f"q{i:02d}"
        questions.append(Question("halueval-qa", qid, text, (Candidate("right", best, "non_hallucinated"),
                                                             Candidate("wrong", hallucinated, "hallucinated"))))
        references[qid] = dict(zip(REFS, answers))
        iw_co[qid] = IwCoAnswers(tuple(w for w, _ in pairs), tuple(c for _, c in pairs), "generator")
    index = QuestionIndex.build([q.question_id for q in questions], [q.question for q in questions], similarity)
    fewl = Fewl(similarity, PARAMS)
    prepared = prepare_questions(fewl, questions, REFS, references, iw_co, index)
    return fewl, questions, prepared, index


def test_neighbours_are_the_paired_questions(run):
    _, questions, _, index = run
    for i, q in enumerate(questions):
        near = index.neighbours(q.question_id, 3, 0.8)
        assert near[0].question_id == f"q{i ^ 1:02d}"  # q00 <-> q01, q02 <-> q03, ...
        assert all(n.similarity <= 0.8 and n.question_id != q.question_id for n in near)
    # a cap below the paired questions' similarity skips them and searches deeper
    capped = index.neighbours("q00", 3, 0.5)
    assert len(capped) == 3 and "q01" not in [n.question_id for n in capped]


def test_fewl_beats_the_single_reference_baseline(run):
    fewl, questions, prepared, _ = run
    assert len(prepared.artefacts) == 14 and not prepared.excluded and not prepared.uniform_fallback
    report = evaluate(fewl, questions, prepared.artefacts, single_reference="m1")
    fewl_share = report.share("fewl", "non_hallucinated", "hallucinated")
    base_share = report.share("single_no_penalty", "non_hallucinated", "hallucinated")
    assert fewl_share >= 12 / 14  # 13 of 14 when written
    assert base_share <= 6 / 14  # 5 of 14: m1 misleads on most of its nine contrarian questions
    assert fewl_share - base_share >= 0.4
    assert set(report.setups) == {"fewl", "single_no_penalty"}


def test_the_penalty_hits_answers_borrowed_from_neighbours(run):
    fewl, questions, prepared, _ = run
    for i in SWAPPED:
        q = questions[i]
        art = prepared.artefacts[q.question_id]
        right, wrong = (fewl.score(c.text, art) for c in q.candidates)
        assert wrong.penalty > right.penalty, q.question


def test_expertise_weighs_the_contrarian_down(run):
    _, _, prepared, _ = run
    weights = {qid: art.expertise.weights for qid, art in prepared.artefacts.items()}
    contrarian = [weights[f"q{i:02d}"] for i in CONTRARIAN]
    mean = [sum(w[r] for w in contrarian) / len(contrarian) for r in range(3)]
    assert mean[0] < 1 / 3 and mean[0] < min(mean[1], mean[2])


def test_all_paper_methods_run(run):
    fewl, questions, prepared, _ = run
    report = evaluate(fewl, questions, prepared.artefacts, methods=paper_methods(PARAMS, "m1"))
    shares = {t.method: t.share for t in report.pairwise}
    assert shares["fewl"] > shares["single_no_penalty"] and shares["multi_no_penalty"] > shares["single_penalty"]
    assert all(t.compared == 14 for t in report.pairwise)
