"""evireform: EviReform multi-hop retrieval (evidence-guided query reformulation for graph
retrieval) with compiled kernels.

The library core is importable from here; the experiments live in
:mod:`evireform.evaluation` and :mod:`evireform.bench`, which the core never imports.
"""

def _version() -> str:
    """The installed distribution's version (pyproject.toml is the one place it is written)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("evireform")
    except PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


__version__ = _version()


def _unshadow_kernels() -> None:
    """Take the source checkout's root off ``sys.path`` when it is there (``python -m ...``
    run inside the checkout puts it first): its top-level ``kernels/`` folder, shipped as
    ``evireform.kernels``, would otherwise shadow the PyPI package ``kernels`` that
    transformers imports.  An installed evireform keeps working: its modules load through
    the installed package, never through that root."""
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not (os.path.isfile(os.path.join(root, "kernels", "__init__.py"))
            and os.path.isfile(os.path.join(root, "pyproject.toml"))):
        return
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    mod = sys.modules.get("kernels")
    if mod is not None and os.path.dirname(os.path.abspath(
            getattr(mod, "__file__", "") or "")) == os.path.join(root, "kernels"):
        del sys.modules["kernels"]


_unshadow_kernels()

import logging as _logging  # noqa: E402

#: the library's logger ("evireform"; modules log to its children, e.g. "evireform.index"):
#: silent until the application configures logging (a NullHandler, as libraries do)
_logging.getLogger("evireform").addHandler(_logging.NullHandler())

from .types import Passage, Proposition  # noqa: E402
from .store import IndexFormatError, UnsafeTargetError  # noqa: E402
from .index import PropositionIndex  # noqa: E402
from .corpus import load_corpus  # noqa: E402
from .entities import canonical_entity  # noqa: E402
from .roles import (BridgeReformulator, Candidate, Controller,  # noqa: E402
                    GraphBridgeReformulator, ObservationController, Reformulator, Selector,
                    TopScoreSelector)
from .retriever import (EviReform, EviReformConfig, RankedPassage, RetrievalResult,  # noqa: E402
                        Trace)
from .explain import EvidenceEdge, EvidenceGraph  # noqa: E402
from .strategies import BGR, HiQ  # noqa: E402
from .engine.shards import ShardedSearcher  # noqa: E402
# the update code: it hands PropositionIndex.load the replay of a service's journal
from . import application as _application  # noqa: E402,F401

__all__ = ["Passage", "Proposition", "PropositionIndex", "IndexFormatError",
           "UnsafeTargetError", "load_corpus", "canonical_entity", "EviReform",
           "EviReformConfig", "RetrievalResult", "RankedPassage", "Trace", "Candidate",
           "Selector", "Reformulator", "Controller", "TopScoreSelector", "BridgeReformulator",
           "GraphBridgeReformulator", "ObservationController", "EvidenceGraph", "EvidenceEdge", "BGR", "HiQ",
           "ShardedSearcher", "__version__"]
