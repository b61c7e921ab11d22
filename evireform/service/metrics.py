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

    def text(self) -> bytes:
        from prometheus_client import generate_latest
        return generate_latest(self.registry)
