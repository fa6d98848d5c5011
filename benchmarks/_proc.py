"""Process measurements the benchmarks share."""

from __future__ import annotations

from pathlib import Path


def rss_mb(field: str = "VmRSS") -> float:
    """Resident memory from /proc/self/status: ``VmRSS`` (all), ``RssAnon`` (private, what
    the process holds), ``RssFile`` (mapped file pages: clean, dropped under pressure)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")
