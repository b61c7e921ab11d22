"""The LLM-free extractor for cased, names-dense text (encyclopedias): one proposition per
sentence, entities from capitalised name spans, numbers and dates, plus the passage title.
"""
from __future__ import annotations

from ..types import Passage, Proposition
from .base import Extractor
from .tokens import split_sentences, spot_entities


class HeuristicExtractor(Extractor):
    """LLM-free extraction: one proposition per sentence.

    Each proposition's text is its sentence, prefixed with ``"<title>: "`` when the sentence
    does not already mention the title, so that a proposition stays self-contained (pronouns
    keep their referent).  Its entities are the spotted names, dates and numbers plus the
    passage title, which links every proposition of a passage.
    """

    name = "heuristic-v1"

    def __init__(self, title_prefix: bool = True, title_entity: bool = True) -> None:
        self.title_prefix: bool = title_prefix
        self.title_entity: bool = title_entity

    def extract(self, passage: Passage) -> list[Proposition]:
        title = passage.title.strip()
        out = []
        for sent in split_sentences(passage.text):
            ents = spot_entities(sent)
            if title and self.title_entity:
                ents.append(title)
            text = sent
            if self.title_prefix and title and title.lower() not in sent.lower():
                text = f"{title}: {sent}"
            out.append(Proposition(text=text, passage=passage.id, entities=tuple(ents)))
        return out
