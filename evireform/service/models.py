"""The HTTP API's models: the result record as served (generated from
:mod:`evireform.records`), the requests, and the other responses."""

import logging
from typing import Any, Annotated, Literal

from ..application import METHODS
from ..records import ResultRecord, TypedDict

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




def http_models(max_k: int, max_questions: int):
    """The request and response models of the HTTP API (pydantic; the 'serve' extra), for a
    service that answers at most ``max_k`` passages and ``max_questions`` questions a batch:
    a namespace of the classes :func:`evireform.service.app.create_app` declares its routes
    with.  The result record's models are :mod:`evireform.records`' (``QueryOut``)."""
    from types import SimpleNamespace
    from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool,
                          StrictStr)

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
        filter: dict[str, Any] | list[StrictStr] | None = None
        namespace: StrictStr | None = Field(None, min_length=1, max_length=1000)

        def where(self):
            """The request's filter with its namespace and-ed in."""
            if self.namespace is None:
                return self.filter
            ns = {"namespace": self.namespace}
            if self.filter is None:
                return ns
            if isinstance(self.filter, list):
                raise ValueError("give 'namespace' with a where clause, not with an id list")
            return {"$and": [ns, self.filter]}

    class QueryIn(Ask):
        question: StrictStr = Field(min_length=1, max_length=4000)

    class BatchIn(Ask):
        questions: list[Annotated[StrictStr, Field(min_length=1, max_length=4000)]] = Field(
            min_length=1, max_length=max_questions)

    class PassageIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        id: StrictStr | None = Field(None, min_length=1, max_length=1000)
        title: StrictStr = Field("", max_length=10_000)
        text: StrictStr = Field(min_length=1, max_length=200_000)
        metadata: dict[str, Any] | None = None

    class UpdateIn(BaseModel):
        model_config = ConfigDict(extra="forbid")
        add: list[PassageIn] = Field(default_factory=list, max_length=10_000)
        upsert: StrictBool = False
        delete: list[StrictStr] = Field(default_factory=list, max_length=100_000)
        delete_where: dict[str, Any] | None = Field(
            None, description="a where clause over passage metadata (the query filter's "
            "language): the passages it matches are deleted, e.g. {\"source\": "
            "\"notes/a.md\"} for one document's; 404 when it matches none")

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
