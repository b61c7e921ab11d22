"""The LLM-free controller (evireform.roles.control): sufficient once every name the question
mentions is found in the observed passages, names compared canonically; it names no gaps."""
from evireform import EviReform, EviReformConfig, PropositionIndex
from evireform.embed import HashingEmbedder
from evireform.roles import ObservationController
from evireform.types import Passage

FILM = Passage("a", "Alpha Film", "Alpha Film is a 1990 drama starring John Doe.")
DOE = Passage("b", "John Doe", "John Doe was born in Lyon.")


def test_sufficient_once_every_name_of_the_question_is_observed():
    c = ObservationController()
    q = "Where was the star of Alpha Film born, according to John Doe's biography?"
    assert c.sufficient(q, [FILM, DOE])
    assert not c.sufficient(q, [DOE])           # "Alpha Film" not seen yet
    assert not c.sufficient(q, [])
    # names are compared canonically (case, punctuation), and found in titles too
    assert c.sufficient("Who is ALPHA FILM's star?", [Passage("x", "Alpha film.", "A film.")])
    # a question that names nothing is sufficient at once (nothing left to resolve)
    assert c.sufficient("where was the star born?", [])
    assert c.assess(q, [DOE]) == (False, [])    # insufficient, but it names no gaps
    assert c.name == "observation-v1"


def test_the_retriever_stops_its_rounds_when_the_controller_is_satisfied():
    """With rounds=3, a question whose names the first round's passages all hold runs one
    round; one whose names the corpus lacks runs all three."""
    idx = PropositionIndex.build([FILM, DOE], HashingEmbedder(64), show_progress=False)
    r = EviReform(idx, embedder=HashingEmbedder(64), config=EviReformConfig(rounds=3))
    assert r.retrieve("Where was the star of Alpha Film born?", k=2).trace.rounds_run == 1
    assert r.retrieve("Where was the star of Omega Film born?", k=2).trace.rounds_run == 3
