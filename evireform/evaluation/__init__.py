"""Experiments on top of the library: question sets, metrics, baselines, the eval runner, the
paper's analyses, index growth and the paired bootstrap.  The library core never imports
this package.

* :mod:`.data` - question files in the HippoRAG formats, matched to a corpus;
* :mod:`.metrics` - Recall/Chain/Hit@K; :mod:`.qa` - answer F1/EM;
* :mod:`.baselines` - BM25, dense passages, dense propositions, HippoRAG-style PPR, by name;
* :mod:`.runner` - :func:`run_eval` and its :class:`EvalReport`;
* :mod:`.analyses`, :mod:`.growth`, :mod:`.stats` - the paper's analyses.
"""
from .data import DATASETS, Question, load_questions
from .metrics import KS, metrics, per_question
from .runner import (DEFAULT_METHODS, METHODS, EvalReport, Method, format_bootstrap,
                     format_table, markdown_table, parse_methods, run_eval)

__all__ = ["DATASETS", "Question", "load_questions", "KS", "metrics", "per_question",
           "DEFAULT_METHODS", "METHODS", "EvalReport", "Method", "format_bootstrap",
           "format_table", "markdown_table", "parse_methods", "run_eval"]
