"""Proposition and entity extraction.

An extractor turns one passage into propositions, each with its entity mentions.  The
interface is :class:`Extractor`; the LLM extractor (another module) implements the same one.

:class:`HeuristicExtractor` is the LLM-free default for encyclopedic text: one proposition
per sentence, entities from capitalised name spans, numbers and dates, plus the passage
title.  :class:`PhraseExtractor` (``--extractor phrases``) needs no capital letters and no
spaces between words: Unicode sentences, and entities chosen by corpus statistics (passage
titles found in the text, and phrases that recur in a few passages), for lower-case notes,
German, Chinese and any other script.  :class:`ProseExtractor` (``--extractor prose``) reads
ordinary prose, where capitals start sentences more often than they mark names.
:func:`read_openie` reads the HippoRAG OpenIE file instead (one triple = one proposition;
subject and object are its entities).

The package's modules, one subject each:

* :mod:`~evireform.extract.base`: the :class:`Extractor` protocol, the namespaces corpus
  statistics are fitted per, and the bounded sample they are fitted from (:data:`FIT_SAMPLE`);
* :mod:`~evireform.extract.tokens`: the tokenizer every extractor and the lexical index
  read text through: Unicode sentences and words, the lexical index's tokens, capitalised
  names, dates, numbers and identifiers, the stopword lists;
* :mod:`~evireform.extract.heuristic`, :mod:`~evireform.extract.phrases`,
  :mod:`~evireform.extract.prose`: one extractor each;
* :mod:`~evireform.extract.auto`: the extractor measured for a corpus, per namespace
  (``--extractor auto``), and the extractors by name, as an index recorded them;
* :mod:`~evireform.extract.openie`: HippoRAG's OpenIE file as propositions.

Every name below is importable from ``evireform.extract`` as before the package existed.
"""
from __future__ import annotations

from .auto import (
    AUTO_CAPITALISED, AUTO_MAX_UNCASED, AUTO_PROSE_MIN, AUTO_RULE, AUTO_SAMPLE_WORDS,
    EXTRACTOR_CHOICES, EXTRACTORS, NamespaceAutoExtractor, choose_extractor,
    extractor_recorded, make_extractor, measure_case)
from .base import FIT_SAMPLE, Extractor, fit_sample
from .heuristic import HeuristicExtractor
from .openie import openie_triples, read_openie
from .phrases import PhraseExtractor
from .prose import ProseExtractor
from .tokens import (
    ENGLISH_STOPWORDS, LOWER_WORD, STOPWORDS, identifiers, lexical_tokens, name_spans, placed,
    sentences, split_sentences, spot_entities, tokens)

__all__ = [
    "AUTO_CAPITALISED", "AUTO_MAX_UNCASED", "AUTO_PROSE_MIN", "AUTO_RULE", "AUTO_SAMPLE_WORDS",
    "ENGLISH_STOPWORDS", "EXTRACTORS", "EXTRACTOR_CHOICES", "Extractor", "FIT_SAMPLE",
    "HeuristicExtractor", "LOWER_WORD", "NamespaceAutoExtractor", "PhraseExtractor",
    "ProseExtractor", "STOPWORDS", "choose_extractor", "extractor_recorded", "fit_sample",
    "identifiers", "lexical_tokens", "make_extractor", "measure_case", "name_spans", "openie_triples",
    "placed", "read_openie", "sentences", "split_sentences", "spot_entities", "tokens"]
