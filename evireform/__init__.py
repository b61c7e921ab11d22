"""evireform: EviReform multi-hop retrieval (evidence-guided query reformulation for graph
retrieval) with compiled kernels."""

__version__ = "0.1.0"

from .types import Passage, Proposition  # noqa: E402
from .index import PropositionIndex, IndexFormatError  # noqa: E402
from .corpus import load_corpus  # noqa: E402
from .entities import canonical_entity  # noqa: E402

__all__ = ["Passage", "Proposition", "PropositionIndex", "IndexFormatError", "load_corpus",
           "canonical_entity", "__version__"]
