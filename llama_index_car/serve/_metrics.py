"""Request counters and latency histograms in the Prometheus text exposition format (0.0.4).

Pure and thread-safe; no client library. Series:

* ``llama_car_requests_total{endpoint, retriever, status}`` — requests answered;
* ``llama_car_errors_total{endpoint, code}`` — error responses by their stable ``code``;
* ``llama_car_request_seconds{endpoint, retriever}`` — a histogram (cumulative ``_bucket``
  with ``le``, ``_sum``, ``_count``) of the time from the request's arrival to the start of
  its response (a stream: to its first byte);
* ``llama_car_generation_info{generation}`` (1), ``llama_car_reloads_total{result}``,
  ``llama_car_in_flight`` — the index generation served, swaps done or failed, requests open.

>>> m = Metrics(buckets=(0.1, 1.0))
>>> m.observe("/v1/retrieve", "car", 200, 0.05)
>>> [l for l in m.render("gen-1").splitlines() if "seconds_bucket" in l][:2]
['llama_car_request_seconds_bucket{endpoint="/v1/retrieve",retriever="car",le="0.1"} 1', 'llama_car_request_seconds_bucket{endpoint="/v1/retrieve",retriever="car",le="1"} 1']
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

#: histogram upper bounds, seconds (``+Inf`` is added)
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


def _label(value: str) -> str:
    """A label value escaped as the text format requires (``\\``, ``"``, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}" if value == int(value) and abs(value) < 1e15 else repr(float(value))


class Metrics:
    """Counters and histograms of one process (module docstring)."""

    def __init__(self, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.buckets = tuple(sorted(float(b) for b in buckets))
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = {}
        self._errors: dict[tuple[str, str], int] = {}
        self._hist: dict[tuple[str, str], list[float]] = {}  # counts per bucket, +Inf, sum
        self._reloads: dict[str, int] = {"ok": 0, "failed": 0}
        self.in_flight = 0

    def observe(self, endpoint: str, retriever: str, status: int, seconds: float,
                code: str | None = None) -> None:
        """Count one response of ``endpoint`` (``retriever``: ``""`` when none) and its time."""
        with self._lock:
            key = (endpoint, retriever, str(int(status)))
            self._requests[key] = self._requests.get(key, 0) + 1
            if code is not None:
                self._errors[(endpoint, code)] = self._errors.get((endpoint, code), 0) + 1
            row = self._hist.setdefault((endpoint, retriever), [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if seconds <= bound:
                    row[i] += 1
            row[-2] += 1
            row[-1] += seconds

    def reloaded(self, ok: bool) -> None:
        """Count one generation swap (``ok``) or a failed attempt."""
        with self._lock:
            self._reloads["ok" if ok else "failed"] += 1

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def render(self, generation: str | None) -> str:
        """Every series in the text format, one ``# HELP``/``# TYPE`` pair per family."""
        with self._lock:
            requests = sorted(self._requests.items())
            errors = sorted(self._errors.items())
            hist = sorted((k, list(v)) for k, v in self._hist.items())
            reloads = dict(self._reloads)
            in_flight = self.in_flight
        out = [
            "# HELP llama_car_requests_total Requests answered, by endpoint, retriever and status.",
            "# TYPE llama_car_requests_total counter",
        ]
        for (endpoint, retriever, status), n in requests:
            out.append(f'llama_car_requests_total{{endpoint="{_label(endpoint)}",'
                       f'retriever="{_label(retriever)}",status="{status}"}} {n}')
        out += ["# HELP llama_car_errors_total Error responses, by endpoint and error code.",
                "# TYPE llama_car_errors_total counter"]
        for (endpoint, code), n in errors:
            out.append(f'llama_car_errors_total{{endpoint="{_label(endpoint)}",'
                       f'code="{_label(code)}"}} {n}')
        out += ["# HELP llama_car_request_seconds Time from request to response, seconds.",
                "# TYPE llama_car_request_seconds histogram"]
        for (endpoint, retriever), row in hist:
            labels = f'endpoint="{_label(endpoint)}",retriever="{_label(retriever)}"'
            for bound, count in zip((*self.buckets, math.inf), row[:-1], strict=True):
                out.append(f'llama_car_request_seconds_bucket{{{labels},le="{_num(bound)}"}} '
                           f"{_num(count)}")
            out.append(f"llama_car_request_seconds_sum{{{labels}}} {row[-1]!r}")
            out.append(f"llama_car_request_seconds_count{{{labels}}} {_num(row[-2])}")
        out += ["# HELP llama_car_generation_info The index generation being served.",
                "# TYPE llama_car_generation_info gauge"]
        if generation is not None:
            out.append(f'llama_car_generation_info{{generation="{_label(generation)}"}} 1')
        out += ["# HELP llama_car_reloads_total Index generation swaps, by result.",
                "# TYPE llama_car_reloads_total counter"]
        for result, n in sorted(reloads.items()):
            out.append(f'llama_car_reloads_total{{result="{result}"}} {n}')
        out += ["# HELP llama_car_in_flight Requests being served.",
                "# TYPE llama_car_in_flight gauge", f"llama_car_in_flight {in_flight}"]
        return "\n".join(out) + "\n"
