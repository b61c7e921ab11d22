"""The HTTP API's models: the result record as served (generated from
:mod:`evireform.records`), the requests, and the other responses."""

import logging
from typing import Any, Annotated, Literal

from ..application import METHODS
from ..records import ResultRecord, TypedDict

#: the longest question a request may ask (characters): /query, /query_batch, the MCP tool
MAX_QUESTION_CHARS = 4000

log = logging.getLogger("evireform.service")


class QueryOut(ResultRecord):
    """The result record (:mod:`evireform.records`: what ``query --json`` prints) and when
    it ran; ``graph`` only when asked for."""

    generation: int
    took_ms: float


class BatchOut(TypedDict):
    results: list[QueryOut]
    generation: int
    took_ms: float




#: a character that no regex flavour (ECMA, Rust, Python) nor ``str.strip`` takes for white
#: space: a string holding one is not blank wherever it is checked
NOT_BLANK = ("[^\\s\\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f"
             "\\u205f\\u3000\\ufeff]")


def metadata_schemas(ref: str = "#/components/schemas/") -> dict[str, Any]:
    """A passage's metadata as the HTTP API publishes it: an object whose values are JSON
    scalars (integers within 64 bits, what the index stores exactly), objects of the same,
    or lists of scalars and objects (a list directly in a list is not taken here)."""
    from ..filters import SCALAR_SCHEMA as scalar
    return {
        "Metadata": {"description": "passage metadata (JSON; integers within 64 bits)",
                     "type": "object", "additionalProperties": {"anyOf": [
                         scalar, {"$ref": ref + "Metadata"},
                         {"type": "array", "items": {"$ref": ref + "MetadataListItem"}}]}},
        "MetadataListItem": {"anyOf": [scalar, {"$ref": ref + "Metadata"}]},
    }


def check_metadata(md: dict[str, Any]) -> dict[str, Any]:
    """``md`` when :func:`metadata_schemas` accepts it, else ``ValueError``."""
    from ..filters import json_scalar as scalar

    def obj(v, at: str) -> None:
        for k, x in v.items():
            if isinstance(x, dict):
                obj(x, f"{at}.{k}")
            elif isinstance(x, list):
                for i, y in enumerate(x):
                    if isinstance(y, dict):
                        obj(y, f"{at}.{k}[{i}]")
                    elif not scalar(y):
                        raise ValueError(f"{at}.{k}[{i}]: a JSON scalar (integers within 64 "
                                         "bits) or an object")
            elif not scalar(x):
                raise ValueError(f"{at}.{k}: a JSON scalar (integers within 64 bits), an "
                                 "object or a list")
    obj(md, "metadata")
    return md


def http_models(max_k: int, max_questions: int):
    """The request and response models of the HTTP API (pydantic; the 'serve' extra), for a
    service that answers at most ``max_k`` passages and ``max_questions`` questions a batch:
    a namespace of the classes :func:`evireform.service.app.create_app` declares its routes
    with.  The result record's models are :mod:`evireform.records`' (``QueryOut``)."""
    from types import SimpleNamespace
    from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                          StrictBool, StrictStr, WithJsonSchema)
    from ..filters import check_where

    #: a where clause: a JSON object, published as the filter language's schema
    #: (evireform.filters.json_schemas, added to the components by the app)
    Where = Annotated[dict[str, Any], AfterValidator(check_where), WithJsonSchema(
        {"$ref": "#/components/schemas/WhereClause"})]
    #: a passage's metadata, published as METADATA_SCHEMAS (what check_metadata takes)
    Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata), WithJsonSchema(
        {"$ref": "#/components/schemas/Metadata"})]

    Method = Literal[METHODS]  # every method of evireform.application.METHODS

    def json_integer(v):
        """JSON Schema's integer: 5 and 5.0 (a number whose fraction is zero), never true,
        5.5 or "5" (what the published schema promises a generated client)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be an integer")
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError("must be an integer")
            return int(v)
        return v

    Integer = Annotated[int, BeforeValidator(json_integer)]

    class Ask(BaseModel):  # what every query request sets besides its question(s)
        model_config = ConfigDict(extra="forbid")
        k: Integer = Field(10, ge=1, le=max_k)
        method: Method = "evireform"
        graph: StrictBool = False
        filter: Where | list[StrictStr] | None = None
        namespace: StrictStr | None = Field(None, min_length=1, max_length=1000)


    #: a question holds something besides white space: a character outside every regex
    #: flavour's white space and Python's (str.strip, which the retriever applies)
    Question = Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                          pattern=NOT_BLANK)]

    class QueryIn(Ask):
        question: Question

    class BatchIn(Ask):
        questions: list[Question] = Field(
            min_length=1, max_length=max_questions)

    class PassageIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: StrictStr | None = Field(None, min_length=1, max_length=1000)
        title: StrictStr = Field("", max_length=10_000)
        text: StrictStr = Field(min_length=1, max_length=200_000, pattern=NOT_BLANK,
                                description="the passage's text: words, not only spaces")
        metadata: Metadata | None = None

    class UpdateIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        # the lists are bounded by the body cap (413), not by an item count
        add: list[PassageIn] = Field(default_factory=list)
        upsert: StrictBool = False
        delete: list[StrictStr] = Field(default_factory=list)
        delete_where: Where | None = Field(
            None, description="a where clause over passage metadata (the query filter's "
            "language): the passages it matches are deleted, e.g. {\"source\": "
            "\"notes/a.md\"} for one document's; 404 when it matches none, 400 when it "
            "matches every passage unless all is true")
        all: StrictBool = Field(
            False, description="delete_where may match every passage of the index (an "
            "empty index stays): without it such a filter is refused")

    # --- what the responses are (the OpenAPI schema; the handlers send plain JSON): the
    # result record is evireform.records' (QueryOut, module level), not restated here

    class UpdateOut(BaseModel):
        generation: int
        passages: int
        propositions: int
        changes: dict[str, int] = Field(description="passages per kind of change (added, "
                                                    "deleted, replaced, duplicates)")

    class IndexOut(BaseModel):
        passages: int
        propositions: int
        embedder: str
        generation: int

    class HealthOut(BaseModel):
        status: Literal["ok", "unavailable"]
        index: IndexOut | None = None
        error: str | None = None

    class ErrorOut(BaseModel):
        """Every error, whatever its status."""
        error: str

    return SimpleNamespace(QueryIn=QueryIn, BatchIn=BatchIn, UpdateIn=UpdateIn,
                           UpdateOut=UpdateOut, HealthOut=HealthOut, ErrorOut=ErrorOut,
                           QueryOut=QueryOut, BatchOut=BatchOut)
