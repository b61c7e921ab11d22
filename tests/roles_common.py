"""What the roles' tests share: a small world whose bridge is a film's star."""

from evireform.types import Passage


# --------------------------------------------------------------------------- a small world
def _world(lower: bool = False):
    """Three passages: the question's film, its star (the bridge) and a decoy the observed
    passage also names; lower-cased when ``lower``."""
    texts = [
        ("alpha", "Alpha Film", "Alpha Film is a 1990 drama. It stars John Doe and was shot "
                                "near the Grey Mill."),
        ("doe", "John Doe", "John Doe was born in Lyon. John Doe studied acting in Paris."),
        ("mill", "Grey Mill", "Grey Mill grinds wheat. Grey Mill makes flour."),
        ("lyon", "Lyon", "Lyon is a city where many actors were born."),
    ]
    f = str.lower if lower else (lambda s: s)
    return [Passage(i, f(t), f(x)) for i, t, x in texts]
