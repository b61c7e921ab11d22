"""``evireform bench``: each kernel and the retrieval core next to its peer, in one run.

* :mod:`.harness` - timing (:func:`times`), machine facts, the case registry, the table and
  the floors that ``--check`` enforces (:data:`FLOORS`);
* :mod:`.cases` - the cases, each declaring the labels it produces;
* :mod:`.synthetic` - synthetic graphs, passage maps and clustered embeddings.

Every case reports the median wall time of ours and of the peer (after a warm-up call that
keeps JIT compilation out), ``speedup = peer_s / ours_s`` and ``agree``.  ``--quick`` shrinks
the sizes so the whole run takes about a minute (CI runs it so the suite cannot rot).
"""
from .harness import (CASES, FLOORS, Case, case, check, declared_labels, machine, median_time,
                      run, table, times)

__all__ = ["CASES", "FLOORS", "Case", "case", "check", "declared_labels", "machine",
           "median_time", "run", "table", "times"]
