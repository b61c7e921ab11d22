"""Filters on passage metadata that isolate exactly.

A filter is either

* a **where clause** over passage metadata, in the syntax Chroma and others use::

      {"year": 2020}                                   # equality (same as {"$eq": 2020})
      {"year": {"$gte": 2000, "$lt": 2010}}            # several operators on a key: all hold
      {"$or": [{"lang": "de"}, {"source": {"$in": ["a.md", "b.md"]}}]}
      {"$and": [{"namespace": "tenant-7"}, {"draft": {"$exists": False}}]}

  operators ``$eq $ne $gt $gte $lt $lte $in $nin $exists`` on a key, ``$and $or`` over lists
  of clauses; several keys in one object must all hold; or
* an explicit **list of passage ids** (every id must be in the index).

**Semantics.**  Retrieval with a filter equals retrieval on an index built from the matching
passages alone, with the same embeddings: the candidates, the selection, the residual hits,
one propagation step with entity degrees and the 1/w normalisation counted over the matching
propositions only, and the readout (the zero-score fill continues in stored order over the
matching passages).  ``tests/test_filters.py`` checks rankings and scores against such a
sub-index build on random corpora and random filters.  A reserved key such as ``namespace``
therefore gives tenants exact isolation: nothing of another tenant's passages, not even
their entity degrees, reaches a result.

**What "equals the sub-index" covers.**  Exactly (rankings and scores) for exact search
and for the int8 scan (whose re-score makes it equal to exact), with every extractor whose
propositions for a passage depend on that passage alone (heuristic, OpenIE, LLM, your own
propositions).  With HNSW search (indexes above ``kernels.config.EXACT_SEARCH_MAX``
matching propositions) a filtered query is approximate, as HNSW itself is: it searches the
same graph with the filter's label test, so its candidates can differ from the sub-index's
own HNSW graph by HNSW's recall (about 5 in 100 rankings in the report that found it),
while below that threshold a filter scans exactly.  The ``phrases`` extractor learns its
vocabulary per namespace (:class:`~evireform.extract.PhraseExtractor`, the metadata key
``namespace``): a filter that selects one namespace equals an index built from that
namespace's passages alone, and no tenant's text shapes another tenant's phrases; a filter
that selects part of a namespace keeps the phrases its namespace learnt (a rebuild from
just those passages would learn fewer).  ``tests/test_hostile_tenants.py`` checks each of these
statements.

**Comparison rules.**  Equality is JSON equality (``1 == 1.0``, but ``true`` is not ``1``;
lists and objects compare whole).  ``$gt $gte $lt $lte`` take a number or a string and match
values of the same kind (a passage whose value is of another kind, or that lacks the key, does
not match).  ``$in``/``$nin`` take a list.  A passage without the key does not match ``$eq``,
``$in`` or an ordering operator, and does match ``$ne`` and ``$nin`` (as MongoDB does).
``$exists`` takes true or false.

**Errors.**  An unknown operator, an operand of the wrong type, a malformed clause or a key
that no passage of the index has (outside ``$exists``) raise ``ValueError`` naming the problem;
a filter that matches no passage gives results with no passages (documented, not an error).

How an engine runs a filter: :func:`restriction` turns it into a :class:`Restriction` (the
passage and proposition masks and the entity degree terms recounted over the matching
propositions: never a copy of the embeddings, which the exact scan reads in place through
the memory map); each engine keeps them (:class:`RestrictionCache`) for the last
:data:`CACHE_SIZE` filters within :data:`CACHE_BYTES`, so a tenant's repeated queries pay
for their filter once.  A filter on a key no passage has is refused and leaves nothing
cached.

**Numbers and strings.**  Integers compare exactly at any size up to the int64 range
(``9007199254740993`` is not ``9007199254740992``), strings exactly (a trailing NUL counts);
an operand beyond the int64 range or not finite is refused, as is an object mixing operators
and keys (``{"$gt": 1, "x": 2}``).  ``$in``/``$nin`` cost O(passages + values).

**Who runs it.**  The retriever's own engine (:mod:`evireform.engine`): a restriction is an
argument of its ``search_batch`` and ``rank_batch``, so a filtered question runs where an
unfiltered one does (the CPU kernels, a sharded searcher, the GPU engine); nothing swaps the
engine under a filter.
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import json
import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ._checks import canonical_value, check_json_value
from ._checks import json_kind as _kind
from .kernels import config as kconfig
from .strings import metadata_of

if TYPE_CHECKING:  # annotations only
    from numpy.typing import ArrayLike
    from .index import PropositionIndex
    from .types import FilterSpec

__all__ = ["compile_filter", "json_schemas", "check_where", "Filter", "FilterTargetMissing", "Restriction",
           "RestrictionCache", "restriction",
           "OPERATORS", "CACHE_SIZE"]

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists")
LOGICAL = ("$and", "$or")
#: restrictions kept per index (the most recently used filters) ...
CACHE_SIZE = 16
#: ... and the bytes they may hold together (masks and recounted degree terms; a single
#: restriction over this is used once and not kept)
CACHE_BYTES = 256 << 20

_MISSING = object()


def _json_equal(a, b) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka != kb:
        return False
    if ka == "list":
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if ka == "object":
        return a.keys() == b.keys() and all(_json_equal(a[x], b[x]) for x in a)
    return a == b


def _check_operand(op: str, v, where: str) -> None:
    if op in ("$eq", "$ne"):
        if _kind(v) not in ("bool", "number", "string", "null", "list", "object"):
            raise ValueError(f"{where}: {op} takes a JSON value; got {v!r:.80}")
    elif op in ("$gt", "$gte", "$lt", "$lte"):
        if _kind(v) not in ("number", "string"):
            raise ValueError(f"{where}: {op} takes a number or a string; got {v!r:.80}")
    elif op in ("$in", "$nin"):
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{where}: {op} takes a list; got {v!r:.80}")
    elif op == "$exists":
        if not isinstance(v, bool):
            raise ValueError(f"{where}: $exists takes true or false; got {v!r:.80}")


def _op_predicate(op: str, v):
    """``value -> bool`` for one operator (``value`` is ``_MISSING`` when the key is absent)."""
    if op == "$eq":
        return lambda x: x is not _MISSING and _json_equal(x, v)
    if op == "$ne":
        return lambda x: x is _MISSING or not _json_equal(x, v)
    if op == "$in":
        vs = list(v)
        return lambda x: x is not _MISSING and any(_json_equal(x, y) for y in vs)
    if op == "$nin":
        vs = list(v)
        return lambda x: x is _MISSING or not any(_json_equal(x, y) for y in vs)
    if op == "$exists":
        return (lambda x: x is not _MISSING) if v else (lambda x: x is _MISSING)
    kind = _kind(v)
    cmp = {"$gt": lambda x: x > v, "$gte": lambda x: x >= v, "$lt": lambda x: x < v,
           "$lte": lambda x: x <= v}[op]
    return lambda x: x is not _MISSING and _kind(x) == kind and cmp(x)


def unknown_ids_error(unknown: Sequence[Any]) -> "FilterTargetMissing":
    """The refusal of an id filter naming ids the index (or a namespace) lacks."""
    return FilterTargetMissing(f"filter: unknown passage ids {list(unknown[:5])!r:.300}"
                               + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))


def missing_key_error(key: Any, present: Any, where: str = "index") -> "FilterTargetMissing":
    """The refusal of a where clause reading a metadata key no passage (of the ``where``) has,
    naming the keys present there."""
    return FilterTargetMissing(f"filter: no passage of the {where} has the metadata key "
                               f"{key!r}; the keys present are {sorted(present)[:20]} (use "
                               "$exists to test for a key that may be absent)")


class FilterTargetMissing(ValueError):
    """A well-formed filter naming passage ids, or a metadata key, that the index does not
    have (the service answers 404)."""


@dataclass(frozen=True)
class Filter:
    """A checked filter: ``ids`` (an explicit id list) or a where clause (``predicate`` over
    a metadata dict), with ``keys`` the metadata keys it reads outside ``$exists`` and
    ``key`` its canonical JSON (the cache key)."""

    key: str
    ids: tuple[Any, ...] | None = None
    predicate: object = field(default=None, compare=False, repr=False)
    keys: frozenset[Any] = frozenset()

    def passage_mask(self, index: PropositionIndex, columns: "_Columns | None" = None) -> np.ndarray:
        """Which passages of ``index`` match (bool, one per passage); ``columns``: the
        metadata columns to read (a :class:`RestrictionCache`'s), else built for the call."""
        n = index.n_passages
        if self.ids is not None:
            mask = np.zeros(n, dtype=bool)
            unknown = [i for i in self.ids if not index.has_passage(i)]
            if unknown:
                raise unknown_ids_error(unknown)
            mask[[index.passage_index(i) for i in self.ids]] = True
            return mask
        cols = columns if columns is not None else _Columns(index)
        if self.keys:  # a key no passage has is a mistake (the columns are needed anyway)
            missing = sorted(k for k in self.keys if not cols.get(k)[0].any())
            if missing:
                raise missing_key_error(missing[0], _metadata_keys(index))
        return self.predicate.mask(cols)


def _metadatas(index: PropositionIndex):
    """Every passage's metadata, in order; for a memory-mapped index only the metadata
    column is decoded (not the ids, titles and texts)."""
    return metadata_of(index.passages)


def _metadata_keys(index: PropositionIndex) -> set[Any]:
    out: set[Any] = set()
    for md in _metadatas(index):
        out.update(md)
    return out


class _Columns:
    """Per metadata key, the passages' values as arrays (built on first use, kept by the
    :class:`RestrictionCache` that holds this): ``kind`` (int8 code of :data:`_KINDS`, 0 =
    missing), ``num`` (float64, NaN unless a number), ``obj`` (the values themselves)."""

    def __init__(self, index: PropositionIndex) -> None:
        self.index, self.cols = index, {}
        self.lock = threading.Lock()

    @property
    def n(self) -> int:
        return self.index.n_passages

    def get(self, key: str):
        with self.lock:
            got = self.cols.get(key)
            if got is None:
                vals = [md.get(key, _MISSING) for md in _metadatas(self.index)]
                kind = np.fromiter((_KIND_CODE[_kind(v)] if v is not _MISSING else 0
                                    for v in vals), dtype=np.int8, count=len(vals))
                if not kind.any():  # a key no passage has: nothing to keep
                    return kind, None, None, None
                num = np.full(len(vals), np.nan)
                isnum = kind == _KIND_CODE["number"]
                big = np.zeros(len(vals), dtype=bool)  # ints that float64 cannot hold exactly
                for i in np.flatnonzero(isnum):
                    num[i], big[i] = _as_float(vals[i])
                obj = np.empty(len(vals), dtype=object)
                obj[:] = vals
                got = self.cols[key] = (kind, num, obj, big)
            return got


def _as_float(v) -> tuple[float, bool]:
    """``(float(v), inexact)``: an int beyond 2**53 may not convert exactly (or at all: a
    value over float64's range becomes +-inf); ``inexact`` says the float is not the value."""
    if isinstance(v, int) and abs(v) > 2 ** 53:
        try:
            f = float(v)
        except OverflowError:
            f = float("inf") if v > 0 else float("-inf")
        return f, True
    return float(v), False


_KIND_CODE = {"bool": 1, "number": 2, "string": 3, "null": 4, "list": 5, "object": 6}


class _Node:
    """A compiled clause: ``mask(columns)`` (vectorised, bool per passage) and
    ``__call__(metadata)`` (one passage)."""

    def __init__(self, mask, one) -> None:
        self.mask, self._one = mask, one

    def __call__(self, md) -> bool:
        return self._one(md)


def _num_cmp_mask(cols, key, v, cmp):
    """``cmp(value, v)`` over the numbers of ``key``, exactly: float64 decides where the
    floats differ (rounding is monotonic), Python's exact comparison where they are equal."""
    kind, num, obj, big = cols.get(key)
    if num is None:
        return np.zeros(cols.n, dtype=bool)
    fv, _ = _as_float(v)
    npcmp = {operator.eq: np.equal, operator.gt: np.greater, operator.ge: np.greater_equal,
             operator.lt: np.less, operator.le: np.less_equal}[cmp]
    out = npcmp(num, fv)
    tie = np.flatnonzero(num == fv)
    if len(tie):
        out[tie] = [cmp(obj[i], v) for i in tie]
    return out


def _eq_mask(cols, key, v):
    kind, num, obj, big = cols.get(key)
    k = _kind(v)
    if num is None:
        return np.zeros(cols.n, dtype=bool)
    if k == "number":
        return _num_cmp_mask(cols, key, v, operator.eq)
    if k in ("string", "bool"):
        out = kind == _KIND_CODE[k]
        rows = np.flatnonzero(out)
        if len(rows):
            out[rows] = [x == v for x in obj[rows]]
        return out
    if k == "null":
        return kind == _KIND_CODE["null"]
    cand = np.flatnonzero(kind == _KIND_CODE[k])  # lists and objects: compared whole
    out = np.zeros(len(kind), dtype=bool)
    out[cand] = [_json_equal(obj[i], v) for i in cand]
    return out


def _op_mask(op: str, key: str, v):
    if op == "$eq":
        return lambda cols: _eq_mask(cols, key, v)
    if op == "$ne":
        return lambda cols: ~_eq_mask(cols, key, v)
    if op == "$in":
        return lambda cols: _in_mask(cols, key, v)
    if op == "$nin":
        return lambda cols: ~_in_mask(cols, key, v)
    if op == "$exists":
        return lambda cols: (cols.get(key)[0] != 0) == v
    cmp = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt,
           "$lte": operator.le}[op]
    if _kind(v) == "number":
        return lambda cols: _num_cmp_mask(cols, key, v, cmp)  # not a number: False

    def strings(cols):  # Python's str order (a numpy str array would drop trailing NULs)
        kind, _, obj, _ = cols.get(key)
        out = kind == _KIND_CODE["string"]
        rows = np.flatnonzero(out)
        if len(rows):
            out[rows] = [cmp(x, v) for x in obj[rows]]
        return out
    return strings


def _in_mask(cols, key, values):
    """``$in``: one pass over the column and one over the values, O(N + L) time and memory
    (hash membership by kind; numbers first by float64 ``isin``, then exactly)."""
    kind, num, obj, big = cols.get(key)
    out = np.zeros(cols.n, dtype=bool)
    if num is None or not len(values):
        return out
    by: dict[str, Any] = {}
    for x in values:
        by.setdefault(_kind(x), []).append(x)
    if "number" in by:
        exact = set(by["number"])  # Python's int/float equality is exact (1 == 1.0)
        fv = np.array([_as_float(x)[0] for x in by["number"]])
        cand = np.flatnonzero((kind == _KIND_CODE["number"]) & np.isin(num, fv))
        if len(cand):
            out[cand] = [obj[i] in exact for i in cand]
    for k in ("string", "bool"):
        if k in by:
            vals = set(by[k])
            rows = np.flatnonzero(kind == _KIND_CODE[k])
            if len(rows):
                out[rows] = [x in vals for x in obj[rows]]
    if "null" in by:
        out |= kind == _KIND_CODE["null"]
    for k in ("list", "object"):  # compared whole, with JSON equality
        if k in by:
            canon = {canonical_value(x) for x in by[k]}
            rows = np.flatnonzero(kind == _KIND_CODE[k])
            if len(rows):
                out[rows] = [canonical_value(x) in canon for x in obj[rows]]
    return out


def _all(nodes):
    if len(nodes) == 1:
        return nodes[0]
    return _Node(lambda cols: np.logical_and.reduce([x.mask(cols) for x in nodes]),
                 lambda md: all(x(md) for x in nodes))


#: how deeply ``$and``/``$or`` may nest in one filter
MAX_DEPTH = 32


def json_schemas(ref: str = "#/components/schemas/") -> dict[str, Any]:
    """The filter language as the HTTP API publishes it (OpenAPI 3.1 components, referenced
    with ``ref``): ``WhereClause`` (metadata keys and ``$and`` / ``$or``), the operator
    object ``FilterOperators``, and ``FilterValue`` (a JSON scalar with integers within 64
    bits, or a list or an object of them: operands nest one level there).
    :func:`check_where` accepts exactly what these accept; a clause both accept compiles
    (:func:`compile_filter`; nesting ``$and`` / ``$or`` is bounded by :data:`MAX_DEPTH`
    besides)."""
    value = {"$ref": ref + "FilterValue"}
    int64, real = SCALAR_SCHEMA["anyOf"][3:]
    scalar = SCALAR_SCHEMA
    ordered = {"anyOf": [{"type": "string"}, int64, real]}
    not_operator = {"not": {"pattern": "^\\$"}}
    plain_object = {"type": "object", "propertyNames": not_operator,
                    "additionalProperties": scalar}
    return {
        "FilterValue": {"description": "a JSON scalar (integers within 64 bits), or a list "
                                       "or an object of them",
                        "anyOf": [scalar, {"type": "array", "items": scalar}, plain_object]},
        "FilterOperators": {
            "description": "operators on one metadata key (" + ", ".join(OPERATORS) + ")",
            "type": "object", "minProperties": 1, "additionalProperties": False,
            "properties": {
                "$eq": {**value, "description": "equal to"},
                "$ne": {**value, "description": "not equal to (or the key absent)"},
                "$gt": {**ordered, "description": "greater than"},
                "$gte": {**ordered, "description": "greater than or equal to"},
                "$lt": {**ordered, "description": "less than"},
                "$lte": {**ordered, "description": "less than or equal to"},
                "$in": {"type": "array", "items": value, "description": "one of"},
                "$nin": {"type": "array", "items": value,
                         "description": "none of (or the key absent)"},
                "$exists": {"type": "boolean",
                            "description": "the key present (true) or absent (false)"}}},
        "WhereClause": {
            "description": "a where clause over passage metadata: each metadata key maps to "
                           "a value (equality) or to operators; $and / $or combine clauses",
            "type": "object",
            "propertyNames": {"anyOf": [{"enum": list(LOGICAL)}, not_operator]},
            "properties": {op: {"type": "array", "minItems": 1,
                                "items": {"$ref": ref + "WhereClause"},
                                "description": ("every clause matches" if op == "$and" else
                                                "at least one clause matches")}
                           for op in LOGICAL},
            "additionalProperties": {"anyOf": [
                scalar, {"type": "array", "items": scalar}, plain_object,
                {"$ref": ref + "FilterOperators"}]}},
    }


_INT64 = (-(2 ** 63) + 1, 2 ** 63 - 1)


#: :func:`json_scalar` as JSON Schema
SCALAR_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string"}, {"type": "boolean"}, {"type": "null"},
    {"type": "integer", "minimum": _INT64[0], "maximum": _INT64[1]},
    {"type": "number", "not": {"type": "integer"}}]}


def json_scalar(v: Any) -> bool:
    """Whether ``v`` is a JSON scalar the published schemas accept: a string, a boolean,
    null, or a number whose integer value (JSON Schema counts 1e20 as an integer) fits 64
    bits."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return True
    if isinstance(v, float):
        return not v.is_integer() or _INT64[0] <= v <= _INT64[1]
    return isinstance(v, int) and _INT64[0] <= v <= _INT64[1]


def check_where(clause: Any, where: str = "filter") -> Any:
    """``clause`` when :func:`json_schemas`' ``WhereClause`` accepts it, else ``ValueError``
    naming the first part it does not (the HTTP API's door: what its schema publishes is
    what it takes)."""
    scalar = json_scalar

    def plain_object(v) -> bool:
        return isinstance(v, dict) and all(isinstance(k, str) and not k.startswith("$")
                                           and scalar(x) for k, x in v.items())

    def value(v) -> bool:
        return scalar(v) or (isinstance(v, list) and all(map(scalar, v))) or plain_object(v)

    def ordered(v) -> bool:
        return isinstance(v, str) or (scalar(v) and not isinstance(v, bool) and v is not None)

    def operators(v) -> bool:
        if not isinstance(v, dict) or not v or not set(v) <= set(OPERATORS):
            return False
        for op, x in v.items():
            ok = (value(x) if op in ("$eq", "$ne") else ordered(x) if op in ("$gt", "$gte",
                  "$lt", "$lte") else isinstance(x, bool) if op == "$exists"
                  else isinstance(x, list) and all(map(value, x)))
            if not ok:
                return False
        return True

    def clause_ok(c, at: str) -> None:
        if not isinstance(c, dict):
            raise ValueError(f"{at}: a where clause must be a JSON object")
        for k, v in c.items():
            if k in LOGICAL:
                if not isinstance(v, list) or not v:
                    raise ValueError(f"{at}.{k}: a non-empty list of clauses")
                for i, sub in enumerate(v):
                    clause_ok(sub, f"{at}.{k}[{i}]")
            elif k.startswith("$"):
                raise ValueError(f"{at}: unknown operator {k!r}; a clause's keys are metadata "
                                 f"keys or one of {LOGICAL}")
            elif isinstance(v, dict) and any(isinstance(x, str) and x.startswith("$")
                                             for x in v) and not set(v) <= set(OPERATORS):
                bad = sorted(str(x) for x in set(v) - set(OPERATORS))
                raise ValueError(f"{at}.{k}: unknown operator {bad[0]!r}; the operators are "
                                 f"{OPERATORS} (an object with other keys is matched by "
                                 "equality, and its keys must not start with '$')")
            elif not (scalar(v) or (isinstance(v, list) and all(map(scalar, v)))
                      or plain_object(v) or operators(v)):
                raise ValueError(f"{at}.{k}: a JSON scalar (integers within 64 bits), a list "
                                 "or an object of them, or operators on them "
                                 f"({', '.join(OPERATORS)}); operands nest one level here")
    clause_ok(clause, where)
    return clause


def _check_values(v, where: str) -> None:
    """Every number in an operand exactly comparable (int64, finite) and every string valid
    Unicode: the rule metadata is written under (:func:`evireform._checks.check_json_value`)."""
    check_json_value(v, where)


def _compile(clause, where: str, keys: set[Any], in_exists: set[Any], depth: int = 0) -> _Node:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: clauses nested more than {MAX_DEPTH} levels deep")
    if not isinstance(clause, dict):
        raise ValueError(f"{where}: a where clause must be a JSON object; got {clause!r:.80}")
    if not clause:
        return _Node(lambda cols: np.ones(cols.n, dtype=bool), lambda md: True)
    parts = []
    for name, value in clause.items():
        if not isinstance(name, str):
            raise ValueError(f"{where}: keys must be strings; got {name!r:.80}")
        if name in LOGICAL:
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"{where}: {name} takes a non-empty list of clauses; got "
                                 f"{value!r:.80}")
            subs = [_compile(c, f"{where}.{name}[{i}]", keys, in_exists, depth + 1)
                    for i, c in enumerate(value)]
            if name == "$and":
                parts.append(_all(subs))
            else:
                parts.append(_Node(
                    (lambda ss: lambda cols: np.logical_or.reduce([x.mask(cols) for x in ss]))(
                        subs), (lambda ss: lambda md: any(x(md) for x in ss))(subs)))
            continue
        if name.startswith("$"):
            raise ValueError(f"{where}: unknown operator {name!r}; a clause's keys are "
                             f"metadata keys or one of {LOGICAL}")
        if isinstance(value, dict) and any(isinstance(k, str) and k.startswith("$")
                                           for k in value) \
                and not all(isinstance(k, str) and k.startswith("$") for k in value):
            raise ValueError(f"{where}.{name}: an object mixes operators and keys "
                             f"({sorted(map(str, value))[:6]}); give operators only, or "
                             "{\"$eq\": {...}} to match an object that has '$' keys")
        ops = value if isinstance(value, dict) and value and \
            all(isinstance(k, str) and k.startswith("$") for k in value) else {"$eq": value}
        for op, v in ops.items():
            if op not in OPERATORS:
                raise ValueError(f"{where}.{name}: unknown operator {op!r}; the operators are "
                                 f"{OPERATORS}")
            _check_operand(op, v, f"{where}.{name}")
            _check_values(v, f"{where}.{name}.{op}")
            (in_exists if op == "$exists" else keys).add(name)
            one = _op_predicate(op, v)
            parts.append(_Node(_op_mask(op, name, v),
                               (lambda n, f: lambda md: f(md.get(n, _MISSING)))(name, one)))
    return _all(parts)


def compile_filter(flt: FilterSpec) -> Filter | None:
    """A :class:`Filter` from a where clause (dict), a list of passage ids, a JSON string of
    either, or a ``Filter``; ``None`` stays ``None`` (no filter).  ``ValueError`` for anything
    malformed."""
    if flt is None or isinstance(flt, Filter):
        return flt
    if isinstance(flt, (str, bytes)):
        from ._checks import loads
        try:
            flt = loads(flt, "filter")
        except json.JSONDecodeError as exc:
            raise ValueError(f"filter: not valid JSON ({exc})") from None
    if isinstance(flt, (list, tuple)):
        bad = [x for x in flt if isinstance(x, bool) or not isinstance(x, (str, int))]
        if bad:
            raise ValueError(f"filter: a list filter holds passage ids (strings); got "
                             f"{bad[0]!r:.80}")
        ids = tuple(dict.fromkeys(str(x) for x in flt))
        return Filter(key=json.dumps(["$ids", sorted(ids)]), ids=ids)
    if not isinstance(flt, dict):
        raise ValueError(f"filter: a where clause (object) or a list of passage ids; got "
                         f"{type(flt).__name__}")
    keys: set[Any] = set()
    in_exists: set[Any] = set()
    pred = _compile(flt, "filter", keys, in_exists)
    try:
        key = json.dumps(flt, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"filter: not plain JSON ({exc})") from None
    return Filter(key=key, predicate=pred, keys=frozenset(keys))


# --------------------------------------------------------------------------- restriction
@dataclass(eq=False)
class Restriction:
    """An index restricted to the passages a filter matches, without building a sub-index.

    ``passages`` / ``props``: the matching passage and proposition positions (ascending);
    ``graph``: the index's incidence with the degree terms ``inv_deg``, ``diag``, ``inv_w``
    recounted over the matching propositions (so one propagation step equals the sub-index's
    on them); ``prop_mask``: which propositions match."""

    filter: Filter
    passages: np.ndarray
    pmask: np.ndarray
    props: np.ndarray
    prop_mask: np.ndarray
    graph: object
    #: the lexical index's BM25 weights recounted over the matching documents, by level
    #: (:meth:`evireform.engine.lexical.LexicalIndex.weights` fills it on first use)
    lexical: dict = field(default_factory=dict, repr=False)

    @property
    def n_passages(self) -> int:
        return len(self.passages)

    @property
    def n_props(self) -> int:
        return len(self.props)

    def nbytes(self) -> int:
        """Bytes this restriction holds (what the cache bound counts)."""
        g = self.graph
        return int(self.passages.nbytes + self.pmask.nbytes + self.props.nbytes
                   + self.prop_mask.nbytes + g.inv_deg.nbytes + g.diag.nbytes
                   + g.inv_w.nbytes + sum(m.indptr.nbytes + m.docs.nbytes + m.weights.nbytes
                                          for m in list(self.lexical.values())))

    def keep_inside(self, indptr: ArrayLike, ids: Any, vals: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Propagated rows (CSR) without the propositions outside the filter (reached
        through a shared entity: the sub-index does not have them)."""
        keep = self.prop_mask[ids]
        if keep.all():
            return indptr, ids, vals
        B = len(indptr) - 1
        rows = np.repeat(np.arange(B), np.diff(indptr))
        out = np.zeros(B + 1, np.int64)
        np.cumsum(np.bincount(rows[keep], minlength=B), out=out[1:])
        return out, ids[keep], vals[keep]

    def fill_batch(self, P: np.ndarray, S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Readout rows ``(P, S)`` completed as the sub-index's (:meth:`fill` per row):
        ``(passages, scores)`` of shape (batch, min(k, matching passages))."""
        kk = min(k, self.n_passages)
        out_p = np.full((len(P), kk), -1, np.int64)
        out_s = np.zeros((len(P), kk))
        for b, (p, s) in enumerate(zip(P, S)):
            p, s = self.fill(p, s, kk)
            out_p[b, :len(p)], out_s[b, :len(s)] = p, s
        return out_p, out_s

    def fill(self, pids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """A readout row completed as the sub-index's: its positive-score passages, then the
        matching passages in stored order (score 0) up to ``k``."""
        npos = int(np.sum(scores > 0))
        head = pids[:npos]
        need = k - npos
        if need <= 0:
            return head[:k], scores[:k]
        first = self.passages[:k + npos]
        tail = first[~np.isin(first, head)][:need]
        return (np.concatenate([head, tail]).astype(np.int64),
                np.concatenate([scores[:npos], np.zeros(len(tail))]))


def _masked_graph(graph, prop_mask: np.ndarray, all_rows: np.ndarray | None = None):
    """``graph`` with inv_deg, diag and inv_w recounted over the propositions in
    ``prop_mask`` (as :meth:`EntityGraph.from_csr` counts them for a sub-index);
    ``all_rows``: the proposition of every incidence (kept by a :class:`RestrictionCache`)."""
    indices = graph.a_indices
    M, E = graph.n_props, graph.n_entities
    if all_rows is None:
        all_rows = _entry_rows(graph)
    entry = prop_mask[all_rows]
    rows = all_rows[entry]
    ents = indices[entry]
    deg = np.bincount(ents, minlength=E).astype(np.float64)
    inv_deg = np.zeros(E, dtype=np.float64)
    inv_deg[deg > 0] = 1.0 / deg[deg > 0]
    diag = np.bincount(rows, weights=inv_deg[ents], minlength=M).astype(np.float64)
    w = np.bincount(rows, weights=1.0 - inv_deg[ents], minlength=M)
    inv_w = np.zeros(M, dtype=np.float64)
    ok = w > kconfig.DEGREE_EPS
    inv_w[ok] = 1.0 / w[ok]
    if not graph.inv_deg.flags.writeable:  # as the loaded (memory-mapped) arrays: the kernels
        for a in (inv_deg, diag, inv_w):   # then run the variant they were compiled for
            a.setflags(write=False)
    return replace(graph, inv_deg=inv_deg, diag=diag, inv_w=inv_w)


def _entry_rows(graph) -> np.ndarray:
    """The proposition of every incidence of ``graph`` (int64, nnz)."""
    return np.repeat(np.arange(graph.n_props, dtype=np.int64), np.diff(graph.a_indptr))


def _build(index: PropositionIndex, f: Filter, columns=None, all_rows=None) -> Restriction:
    pmask = f.passage_mask(index, columns)
    prop_mask = pmask[np.asarray(index.owner)]
    return Restriction(f, np.flatnonzero(pmask).astype(np.int64), pmask,
                       np.flatnonzero(prop_mask).astype(np.int64), prop_mask,
                       _masked_graph(index.graph, prop_mask, all_rows))


def restriction(index: PropositionIndex, flt: FilterSpec) -> Restriction | None:
    """The :class:`Restriction` of ``index`` for filter ``flt`` (see :func:`compile_filter`),
    built for this call (an engine keeps them: :class:`RestrictionCache`); ``None`` for no
    filter.  ``ValueError`` for a malformed filter, a key no passage has, unknown ids."""
    f = compile_filter(flt)
    return None if f is None else _build(index, f)


class RestrictionCache:
    """The restrictions of one index for its last :data:`CACHE_SIZE` filters within
    :data:`CACHE_BYTES` (one over the bound is used, not kept), with the metadata columns and
    the incidence rows they are built from.  Each engine holds one
    (:mod:`evireform.engine`), so the index holds no cache of the filters', and a tenant's
    repeated queries pay for their filter once.  Thread-safe."""

    columns: _Columns

    def __init__(self, index: PropositionIndex) -> None:
        self.index: PropositionIndex = index
        self.columns = _Columns(index)
        self._rows = None
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, flt: FilterSpec) -> bool:
        f = compile_filter(flt)
        return f is not None and f.key in self._items

    def nbytes(self) -> int:
        """Bytes the kept restrictions hold (what :data:`CACHE_BYTES` bounds)."""
        with self._lock:
            return sum(r.nbytes() for r in self._items.values())

    def clear(self) -> None:
        """Forget the restrictions (the metadata columns stay)."""
        with self._lock:
            self._items.clear()

    def get(self, flt: FilterSpec) -> Restriction | None:
        """The restriction for ``flt`` (cached), ``None`` for no filter."""
        f = compile_filter(flt)
        if f is None:
            return None
        with self._lock:
            got = self._items.get(f.key)
            if got is not None:
                self._items.move_to_end(f.key)
                return got
            if self._rows is None:
                self._rows = _entry_rows(self.index.graph)
            rows = self._rows
        r = _build(self.index, f, self.columns, rows)
        with self._lock:
            self._items[f.key] = r
            while len(self._items) > CACHE_SIZE or (
                    len(self._items) > 1
                    and sum(x.nbytes() for x in self._items.values()) > CACHE_BYTES):
                self._items.popitem(last=False)
            if r.nbytes() > CACHE_BYTES:
                self._items.pop(f.key, None)
        return r
