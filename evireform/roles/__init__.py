"""The retriever's three decision roles and their LLM-free implementations.

* :class:`Selector` picks seed propositions among the question's candidates (paper Eq. 7);
* :class:`Reformulator` turns the question and the observed passages into residual queries
  (section 3.6);
* :class:`Controller` decides, between rounds, whether the evidence is sufficient (Eq. 19).

The LLM implementations (:mod:`evireform.llm`) plug into the same interfaces.  Whatever a
role returns is validated by the retriever (Appendix C.1), so a role can never crash
retrieval.

The package's modules, one subject each:

* :mod:`~evireform.roles.base`: the three protocols, the candidates a selector is shown
  (:class:`Candidate`, :class:`Candidates`) and :class:`RoleResult`;
* :mod:`~evireform.roles.queries`: the query cleaning they share (:func:`clean_queries`,
  :data:`MAX_QUERY_CHARS`, :data:`QUESTION_STOPWORDS`, :func:`residual_words`,
  :func:`focus_words`);
* :mod:`~evireform.roles.select`: :class:`TopScoreSelector` (the default) and
  :class:`LearnedSelector`;
* :mod:`~evireform.roles.reformulate`: :class:`GraphBridgeReformulator` (the default) and
  :class:`BridgeReformulator`;
* :mod:`~evireform.roles.control`: :class:`ObservationController`;
* :mod:`~evireform.roles.split`: Hi-Q's split and substitution without an LLM
  (:class:`HeuristicSplitter`, :class:`SubstitutionRewriter`).

Every name below is importable from ``evireform.roles`` as before the package existed.
"""
from __future__ import annotations

from .base import Candidate, Candidates, Controller, Reformulator, RoleResult, Selector
from .control import ObservationController
from .queries import (
    MAX_QUERY_CHARS, QUESTION_STOPWORDS, clean_queries, focus_words, residual_words)
from .reformulate import (
    REFORMULATORS, BridgeReformulator, GraphBridgeReformulator, make_reformulator,
    prose_index, surface_form)
from .select import SELECTOR_FEATURES, LearnedSelector, TopScoreSelector, selector_features
from .split import HeuristicSplitter, SubstitutionRewriter, constraints, covers, split_query

__all__ = [
    "BridgeReformulator", "Candidate", "Candidates", "Controller", "GraphBridgeReformulator",
    "HeuristicSplitter", "LearnedSelector", "MAX_QUERY_CHARS", "ObservationController",
    "QUESTION_STOPWORDS", "REFORMULATORS", "Reformulator", "RoleResult", "SELECTOR_FEATURES",
    "Selector", "SubstitutionRewriter", "TopScoreSelector", "clean_queries", "constraints",
    "covers", "focus_words", "make_reformulator", "prose_index", "residual_words",
    "selector_features", "split_query", "surface_form"]
