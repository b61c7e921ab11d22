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

    #: the index generation that answered (it grows with each update)
    generation: int
    #: how long the request took in the service, in milliseconds
    took_ms: float


class BatchOut(TypedDict):
    """Every question's result, in the order asked."""

    #: one result record per question
    results: list[QueryOut]
    #: the index generation that answered them all
    generation: int
    #: how long the request took in the service, in milliseconds
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
        k: Integer = Field(10, ge=1, le=max_k, description="how many passages to return")
        method: Method = Field("evireform", description="the retrieval method")
        graph: StrictBool = Field(False, description="add the evidence graph: how each "
                                                     "passage was reached")
        filter: Where | list[StrictStr] | None = Field(
            None, description="a where clause over passage metadata, or a list of passage "
                              "ids: only those passages are searched")
        namespace: StrictStr | None = Field(None, min_length=1, max_length=1000,
                                            description="a tenant's namespace: only its "
                                                        "passages are searched")


    #: a question holds something besides white space: a character outside every regex
    #: flavour's white space and Python's (str.strip, which the retriever applies)
    Question = Annotated[StrictStr, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                          pattern=NOT_BLANK)]

    class QueryIn(Ask):
        question: Question = Field(description="the question, in words")
        answer: StrictBool = Field(
            False, description="also answer the question from the passages, citing them: "
            "the service's LLM's answer when it has one (serve --llm), else the passages' "
            "best-matching sentence, marked extractive; 'not found in these documents' when "
            "they do not hold it")

    class BatchIn(Ask):
        questions: list[Question] = Field(
            min_length=1, max_length=max_questions,
            description="the questions, answered in one batched pass")

    class PassageIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: StrictStr | None = Field(None, min_length=1, max_length=1000,
                                     description="the passage's id (default: one made "
                                                 "from its content)")
        title: StrictStr = Field("", max_length=10_000, description="its title")
        text: StrictStr = Field(min_length=1, max_length=200_000, pattern=NOT_BLANK,
                                description="the passage's text: words, not only spaces")
        metadata: Metadata | None = Field(None, description="its metadata (what filters "
                                                           "match on)")

    class UpdateIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        # the lists are bounded by the body cap (413), not by an item count
        add: list[PassageIn] = Field(default_factory=list, description="passages to add")
        upsert: StrictBool = Field(False, description="an added passage whose id the index "
                                                      "holds replaces it (else: 409)")
        delete: list[StrictStr] = Field(default_factory=list,
                                        description="ids of passages to delete")
        delete_where: Where | None = Field(
            None, description="a where clause over passage metadata (the query filter's "
            "language): the passages it matches are deleted, e.g. {\"source\": "
            "\"notes/a.md\"} for one document's; 404 when it matches none, 409 when it "
            "matches every passage unless all is true")
        all: StrictBool = Field(
            False, description="delete_where may match every passage of the index (an "
            "empty index stays): without it such a filter is refused")
        namespace: StrictStr | None = Field(
            None, min_length=1, max_length=1000,
            description="a tenant's update, confined to its passages: added passages get "
                        "this namespace, ids to delete or replace are judged inside it, and "
                        "delete_where is and-ed with it")

    # --- what the responses are (the OpenAPI schema; the handlers send plain JSON): the
    # result record is evireform.records' (QueryOut, module level), not restated here

    class UpdateOut(BaseModel):
        generation: int = Field(description="the new index generation")
        passages: int = Field(description="passages in the index now")
        propositions: int = Field(description="propositions in the index now")
        changes: dict[str, int] = Field(description="passages per kind of change (added, "
                                                    "deleted, replaced, duplicates)")

    class IndexOut(BaseModel):
        """The index served."""
        passages: int = Field(description="passages in the index")
        propositions: int = Field(description="propositions in the index")
        embedder: str = Field(description="the embedder the index was built with")
        generation: int = Field(description="the index generation served")

    class HealthOut(BaseModel):
        """Whether the service can answer."""
        status: Literal["ok", "unavailable"] = Field(description="ok: questions are "
                                                                 "answered")
        index: IndexOut | None = Field(None, description="the index served, when ok")
        error: str | None = Field(None, description="why not, when unavailable")

    class FileResult(BaseModel):
        """What became of one uploaded file."""
        file: str = Field(description="the file's name as uploaded")
        status: Literal["indexed", "skipped"] = Field(description="indexed, or skipped "
                                                                  "(not kept)")
        source: str | None = Field(None, description="its source in the index "
                                                     "(uploads/NAME), when indexed")
        passages: int | None = Field(None, description="its passages, when indexed")
        reason: str | None = Field(None, description="why it was skipped")

    class DocumentsOut(UpdateOut):
        """Each file's result and the new generation."""
        files: list[FileResult] = Field(description="one result per uploaded file")

    class SourceOut(BaseModel):
        """One document the index holds."""
        source: str = Field(description="its path below its folder (uploads/NAME for an "
                                        "upload)")
        passages: int = Field(description="its passages in the index")
        title: str = Field(description="its title")

    class SourcesOut(BaseModel):
        """The documents the index holds."""
        sources: list[SourceOut] = Field(description="in name order")
        generation: int = Field(description="the index generation read")

    class PassageOut(BaseModel):
        """One passage."""
        id: str = Field(description="its id")
        title: str = Field(description="its title")
        text: str = Field(description="its text")
        metadata: dict[str, Any] = Field(description="its metadata")

    class ErrorOut(BaseModel):
        """Every error, whatever its status."""
        error: str = Field(description="what went wrong, in one line")

    return SimpleNamespace(DocumentsOut=DocumentsOut, SourcesOut=SourcesOut,
                           PassageOut=PassageOut, QueryIn=QueryIn, BatchIn=BatchIn, UpdateIn=UpdateIn,
                           UpdateOut=UpdateOut, HealthOut=HealthOut, ErrorOut=ErrorOut,
                           QueryOut=QueryOut, BatchOut=BatchOut)
