"""The service's Prometheus metrics (its own registry)."""

import logging


log = logging.getLogger("evireform.service")


class Metrics:
    """Prometheus metrics of one service (its own registry)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = r = CollectorRegistry()
        self.requests = Counter("evireform_requests", "HTTP requests", ["endpoint", "status"],
                                registry=r)
        self.errors = Counter("evireform_errors", "requests answered with an error",
                              ["endpoint", "status"], registry=r)
        self.latency = Histogram("evireform_request_seconds", "request latency", ["endpoint"],
                                 registry=r, buckets=(.001, .0025, .005, .0075, .01, .015, .02,
                                                      .03, .05, .075, .1, .25, .5, 1, 2.5, 5))
        self.queue_depth = Gauge("evireform_queue_depth", "questions waiting for a batch",
                                 registry=r)
        self.batch_size = Histogram("evireform_batch_size", "questions per retrieve_many",
                                    registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self.rejected = Counter("evireform_rejected", "questions refused: queue full",
                                registry=r)
        self.generation = Gauge("evireform_index_generation", "index generation served",
                                registry=r)
        #: evireform.timing's stages: one observation per retrieve_many for EviReform (its
        #: stages run once for the whole batch), one per question for BGR and Hi-Q
        self.stage = Histogram("evireform_stage_seconds", "wall time of a retrieval stage "
                               "(evireform.timing)", ["method", "stage"], registry=r,
                               buckets=(.0001, .00025, .0005, .001, .0025, .005, .01, .025,
                                        .05, .1, .25, .5, 1, 2.5, 5, 10, 30))

    def observe_stages(self, results) -> None:
        """Each stage of ``results`` (one retrieve_many's) into :attr:`stage`: a batch's
        shared EviReform stages once, each strategy result's own."""
        for n, res in enumerate(results):
            method = getattr(res.trace, "method", "evireform")
            if method == "evireform" and n:
                break  # every result of the batch carries the same timings
            for name, ms in res.trace.timings_ms.items():
                self.stage.labels(method, name).observe(ms / 1e3)

    def text(self) -> bytes:
        from prometheus_client import generate_latest
        return generate_latest(self.registry)
