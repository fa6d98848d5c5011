"""Metadata filters checked before they reach BM25 or a vector store.

Filters come from callers (views of an index take them per retriever; they are never read
from an index folder) and are untrusted. Each store client has its own rules (and its own errors, some of them deep
inside the client) for what a filter may hold, so :func:`check_filters` enforces the common
subset every store and the BM25 channel agree on, and names the offending filter:

* a key is a non-empty string of at most 128 characters without quotes, backslashes or
  control characters (a quote in a key reaches a store's query language);
* ``==``/``!=`` compare with a string, a finite number or a bool — never ``None``;
* ``>``, ``<``, ``>=``, ``<=`` compare with a finite number;
* ``in``/``nin``/``any``/``all`` take a non-empty list (at most 1,000) of strings or finite
  numbers; ``text_match``/``contains`` take a string; ``is_empty`` takes no value;
* nesting is at most 8 levels deep and 1,000 leaves in all.
"""

from __future__ import annotations

import math
import re
from typing import Any

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_car._errors import ConfigurationError

__all__ = ["check_filters"]

MAX_DEPTH = 8
MAX_LEAVES = 1000
MAX_KEY_CHARS = 128
MAX_LIST = 1000
_BAD_KEY = re.compile(r"[\"'`\\\x00-\x1f\x7f]")
_ORDERED = {FilterOperator.GT, FilterOperator.LT, FilterOperator.GTE, FilterOperator.LTE}
_LISTS = {FilterOperator.IN, FilterOperator.NIN, FilterOperator.ANY, FilterOperator.ALL}
_TEXT = {FilterOperator.TEXT_MATCH, FilterOperator.CONTAINS}
_TEXT |= {getattr(FilterOperator, "TEXT_MATCH_INSENSITIVE", FilterOperator.TEXT_MATCH)}


def _scalar(value: Any) -> bool:
    if isinstance(value, bool | str):
        return True
    return isinstance(value, int | float) and math.isfinite(value)


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


def _leaf_problem(leaf: MetadataFilter) -> str | None:
    key, op, value = leaf.key, leaf.operator, leaf.value
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or _BAD_KEY.search(key):
        return f"key {key!r} is invalid (1-{MAX_KEY_CHARS} characters, no quotes or controls)"
    if op == FilterOperator.IS_EMPTY:
        return None
    if op in (FilterOperator.EQ, FilterOperator.NE):
        ok = _scalar(value)
        want = "a string, a finite number or a bool"
    elif op in _ORDERED:
        ok = _number(value)
        want = "a finite number"
    elif op in _LISTS:
        ok = (
            isinstance(value, list)
            and 0 < len(value) <= MAX_LIST
            and all(isinstance(v, str) or _number(v) for v in value)
        )
        want = f"a list of 1-{MAX_LIST} strings or finite numbers"
    elif op in _TEXT:
        ok = isinstance(value, str)
        want = "a string"
    else:
        return f"operator {op!s} is not supported"
    return None if ok else f"{key} {op.value} {value!r}: the value must be {want}"


def check_filters(filters: MetadataFilters | None, where: str = "filters") -> None:
    """Raise :class:`ConfigurationError` naming ``where`` and the first bad filter in
    ``filters`` (see the module docstring for the rules); ``None`` passes.

    >>> check_filters(MetadataFilters(filters=[MetadataFilter(key="year", value=2019)]))
    >>> check_filters(MetadataFilters(filters=[MetadataFilter(key="year", value=None)]))
    Traceback (most recent call last):
      ...
    llama_index_car._errors.ConfigurationError: filters: year == None: the value must be a string, a finite number or a bool
    """
    if filters is None:
        return
    leaves = 0
    stack: list[tuple[Any, int]] = [(filters, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, MetadataFilters):
            if depth > MAX_DEPTH:
                raise ConfigurationError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            stack.extend((child, depth + 1) for child in node.filters)
            continue
        leaves += 1
        if leaves > MAX_LEAVES:
            raise ConfigurationError(f"{where}: more than {MAX_LEAVES} filters")
        if not isinstance(node, MetadataFilter):
            raise ConfigurationError(f"{where}: {type(node).__name__} is not a MetadataFilter")
        problem = _leaf_problem(node)
        if problem is not None:
            raise ConfigurationError(f"{where}: {problem}")
