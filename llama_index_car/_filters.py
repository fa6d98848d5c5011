"""Metadata filters: one meaning per operator on every channel, checked before any channel.

Filters come from callers (views of an index take them per retriever; they are never read
from an index folder) and are untrusted. The BM25 channel and an in-memory index evaluate
them with :func:`matches`; a vector store translates them into its own query language,
whose meaning differs from store to store (Milvus reads ``text_match`` as a ``LIKE`` prefix
pattern, so ``"%"`` matched every node while BM25 matched none; Qdrant reads it as a
tokenized full-text match; Chroma does not have it). So :func:`check_filters` allows on each
store only what that store evaluates exactly as :func:`matches` does — the table
:data:`STORE_RULES`, measured against every store by ``tests/test_filter_channels.py`` — and
refuses the rest with a :class:`~llama_index_car._errors.ConfigurationError` naming the filter
and the store. No channel ever answers a filter with another meaning.

The meaning (:func:`matches`), for the value ``v`` of ``key`` in a node's metadata:

* ``is_empty``: ``v`` is missing, ``None`` or ``[]`` (an empty string is a value);
* every other operator is false when ``v`` is missing or ``None``;
* ``==``/``!=``: ``v`` equals / differs from the value, numbers compared as numbers
  (``3 == 3.0``), a string never equal to a number, a bool only to a bool;
* ``>``, ``>=``, ``<``, ``<=``: ``v`` is a number (not a bool) and compares so;
* ``in``/``nin``: ``v`` equals one / none of the listed values;
* ``text_match``: ``v`` is a string containing the value; ``text_match_insensitive``: the
  same after ``str.lower`` on both;
* ``contains``/``any``/``all``: ``v`` is a list holding the value / any / all of the values;
* conditions: ``and`` (all), ``or`` (any), ``not`` (none of its filters).

The checks every channel applies (:func:`check_filters`):

* a key is a non-empty string of at most 128 characters without quotes, backslashes or
  control characters (a quote in a key reaches a store's query language);
* ``==``/``!=`` compare with a string, a finite number or a bool — never ``None``;
* ``>``, ``<``, ``>=``, ``<=`` compare with a finite number;
* ``in``/``nin``/``any``/``all`` take a non-empty list (at most 1,000) of strings or finite
  numbers; ``text_match``/``contains`` take a string; ``is_empty`` takes no value;
* integers lie in the 64-bit range (Milvus raised on ``10**30``);
* nesting is at most 8 levels deep and 1,000 leaves in all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_car._errors import ConfigurationError

MAX_DEPTH = 8
MAX_LEAVES = 1000
MAX_KEY_CHARS = 128
MAX_LIST = 1000
INT64 = (-(2**63), 2**63 - 1)
_BAD_KEY = re.compile(r"[\"'`\\\x00-\x1f\x7f]")
_OP = FilterOperator
_ORDERED = {_OP.GT, _OP.LT, _OP.GTE, _OP.LTE}
_LISTS = {_OP.IN, _OP.NIN, _OP.ANY, _OP.ALL}
_TEXT = {_OP.TEXT_MATCH, _OP.TEXT_MATCH_INSENSITIVE, _OP.CONTAINS}


# ----------------------------------------------------------------------------- the meaning
def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _same(a: Any, b: Any) -> bool:
    """Equal as the filters mean it: numbers as numbers, strings as strings, bools as bools."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return isinstance(a, str) and isinstance(b, str) and a == b


def _leaf_matches(op: FilterOperator, value: Any, v: Any) -> bool:
    if op == _OP.IS_EMPTY:
        return v is None or (isinstance(v, list) and not v)
    if v is None:
        return False
    if op == _OP.EQ:
        return _same(v, value)
    if op == _OP.NE:
        return not _same(v, value)
    if op in _ORDERED:
        if not (_is_number(v) and _is_number(value)):
            return False
        return bool({_OP.GT: v > value, _OP.GTE: v >= value, _OP.LT: v < value,
                     _OP.LTE: v <= value}[op])
    if op == _OP.IN:
        return any(_same(v, x) for x in value)
    if op == _OP.NIN:
        return not any(_same(v, x) for x in value)
    if op == _OP.TEXT_MATCH:
        return isinstance(v, str) and isinstance(value, str) and value in v
    if op == _OP.TEXT_MATCH_INSENSITIVE:
        return isinstance(v, str) and isinstance(value, str) and value.lower() in v.lower()
    if not isinstance(v, list):
        return False
    if op == _OP.CONTAINS:
        return any(_same(x, value) for x in v)
    if op == _OP.ANY:
        return any(_same(x, y) for x in v for y in value)
    if op == _OP.ALL:
        return all(any(_same(x, y) for x in v) for y in value)
    raise ConfigurationError(f"operator {op!s} is not supported")


def matches(filters: MetadataFilters, metadata: dict[str, Any]) -> bool:
    """Whether ``metadata`` passes ``filters`` (possibly nested), with the meaning of the
    module docstring.

    >>> f = MetadataFilters(filters=[MetadataFilter(key="n", value=3, operator=">=")])
    >>> matches(f, {"n": 3.0}), matches(f, {"n": "3"}), matches(f, {})
    (True, False, False)
    """
    results = (
        matches(f, metadata) if isinstance(f, MetadataFilters)
        else _leaf_matches(f.operator, f.value, metadata.get(f.key))
        for f in filters.filters
    )
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return all(results)
    if cond == FilterCondition.OR:
        return any(results)
    if cond == FilterCondition.NOT:
        return not any(results)
    raise ConfigurationError(f"unsupported filter condition {cond!r}; use 'and', 'or' or 'not'")


# ----------------------------------------------------------------------------- stores
@dataclass(frozen=True)
class StoreRules:
    """What a store evaluates exactly as :func:`matches` does."""

    operators: frozenset[FilterOperator]
    conditions: frozenset[FilterCondition]
    #: characters a string value may not hold (they reach the store's query language)
    bad_chars: str = ""
    #: characters a ``text_match`` value may not hold (the store reads them as a pattern)
    bad_text_chars: str = ""
    #: list values must all be strings or all integers (no floats)
    plain_lists: bool = False


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_QUOTES = "'\"\\" + "".join(chr(c) for c in range(32)) + "\x7f"
_COMPARE = frozenset({_OP.EQ, _OP.GT, _OP.GTE, _OP.LT, _OP.LTE, _OP.IN})
_AND_OR = frozenset({FilterCondition.AND, FilterCondition.OR})
#: store kind (:data:`llama_index_car.stores.STORE_KINDS`; pgserver is ``postgresql``) → rules
STORE_RULES: dict[str, StoreRules] = {
    # NE / NIN match a node without the key in Chroma; text matching and NOT it has not
    "chroma": StoreRules(_COMPARE, _AND_OR),
    # text_match is a LIKE prefix pattern, is_empty an array test, NOT is dropped, NIN
    # matches a node without the key; a backslash or quote in a string breaks its expression
    "milvus": StoreRules(_COMPARE | {_OP.NE}, _AND_OR, bad_chars=_QUOTES),
    # text_match is a tokenized full-text match; MatchAny takes strings or integers only
    "qdrant": StoreRules(_COMPARE | {_OP.NE, _OP.NIN, _OP.IS_EMPTY},
                         _AND_OR | {FilterCondition.NOT}, plain_lists=True),
    # text_match is LIKE '%v%' (so no % or _ in it); a quote in a value reaches the SQL
    "postgresql": StoreRules(
        _COMPARE | {_OP.NE, _OP.NIN, _OP.IS_EMPTY, _OP.TEXT_MATCH, _OP.TEXT_MATCH_INSENSITIVE},
        _AND_OR, bad_chars=_QUOTES, bad_text_chars="%_",
    ),
}
#: vector store class (or a base of it) → store kind of :data:`STORE_RULES`
_STORE_CLASSES = {
    "ChromaVectorStore": "chroma", "MilvusVectorStore": "milvus",
    "QdrantVectorStore": "qdrant", "PGVectorStore": "postgresql",
}


def store_rules(vector_store: Any) -> tuple[str, StoreRules] | None:
    """``(kind, rules)`` of a LlamaIndex vector store of a known kind, else ``None`` (an
    in-memory store is searched by the index itself with :func:`matches`; another store's
    translation is its own)."""
    for cls in type(vector_store).__mro__:
        kind = _STORE_CLASSES.get(cls.__name__)
        if kind is not None:
            return kind, STORE_RULES[kind]
    return None


# ----------------------------------------------------------------------------- checks
def _scalar(value: Any) -> bool:
    if isinstance(value, bool | str):
        return True
    return _number(value)


def _number(value: Any) -> bool:
    if not _is_number(value):
        return False
    if isinstance(value, int):
        return INT64[0] <= value <= INT64[1]
    return math.isfinite(value)


def _leaf_problem(leaf: MetadataFilter) -> str | None:
    key, op, value = leaf.key, leaf.operator, leaf.value
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or _BAD_KEY.search(key):
        return f"key {key!r} is invalid (1-{MAX_KEY_CHARS} characters, no quotes or controls)"
    if op == _OP.IS_EMPTY:
        return None
    if op in (_OP.EQ, _OP.NE):
        ok = _scalar(value)
        want = "a string, a bool or a number (finite, 64-bit for integers)"
    elif op in _ORDERED:
        ok = _number(value)
        want = "a number (finite, 64-bit for integers)"
    elif op in _LISTS:
        ok = (
            isinstance(value, list)
            and 0 < len(value) <= MAX_LIST
            and all(isinstance(v, str) or _number(v) for v in value)
        )
        want = f"a list of 1-{MAX_LIST} strings or numbers (finite, 64-bit for integers)"
    elif op in _TEXT:
        ok = isinstance(value, str)
        want = "a string"
    else:
        return f"operator {op!s} is not supported"
    return None if ok else f"{key} {op.value} {value!r}: the value must be {want}"


def _store_problem(leaf: MetadataFilter, kind: str, rules: StoreRules) -> str | None:
    key, op, value = leaf.key, leaf.operator, leaf.value
    name = f"{key} {op.value} {value!r}"[:120]
    if op not in rules.operators:
        allowed = ", ".join(sorted(o.value for o in rules.operators))
        return (f"{name}: the {kind} store does not evaluate {op.value!r} as the other "
                f"channels do; on {kind} use {allowed}")
    if not _IDENT.match(key):
        return f"{name}: a {kind} store needs a key of letters, digits and _"
    values = value if isinstance(value, list) else [value]
    strings = [v for v in values if isinstance(v, str)]
    if any(c in s for s in strings for c in rules.bad_chars):
        return f"{name}: a {kind} store cannot take quotes, backslashes or controls in a value"
    if op in (_OP.TEXT_MATCH, _OP.TEXT_MATCH_INSENSITIVE) and any(
            c in s for s in strings for c in rules.bad_text_chars):
        return f"{name}: the {kind} store reads {rules.bad_text_chars!r} in text_match as a pattern"
    if rules.plain_lists and isinstance(value, list) and not (
            all(isinstance(v, str) for v in value)
            or all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return f"{name}: a {kind} store needs a list of strings only or of integers only"
    return None


def check_filters(
    filters: MetadataFilters | None, where: str = "filters", store: Any = None
) -> None:
    """Raise :class:`ConfigurationError` naming ``where`` and the first bad filter in
    ``filters`` (see the module docstring for the rules); ``None`` passes. ``store``: the
    vector store of the dense channel; a filter it would read with another meaning than
    :func:`matches` (:data:`STORE_RULES`) is refused, naming the store.

    >>> check_filters(MetadataFilters(filters=[MetadataFilter(key="year", value=2019)]))
    >>> check_filters(MetadataFilters(filters=[MetadataFilter(key="year", value=None)]))
    Traceback (most recent call last):
      ...
    llama_index_car._errors.ConfigurationError: filters: year == None: the value must be a string, a bool or a number (finite, 64-bit for integers)
    """
    if filters is None:
        return
    known = store_rules(store) if store is not None else None
    leaves = 0
    stack: list[tuple[Any, int]] = [(filters, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, MetadataFilters):
            if depth > MAX_DEPTH:
                raise ConfigurationError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            cond = node.condition or FilterCondition.AND
            if known is not None and cond not in known[1].conditions:
                raise ConfigurationError(
                    f"{where}: the {known[0]} store does not evaluate condition "
                    f"{cond.value!r} as the other channels do; use "
                    f"{', '.join(sorted(c.value for c in known[1].conditions))}"
                )
            stack.extend((child, depth + 1) for child in node.filters)
            continue
        leaves += 1
        if leaves > MAX_LEAVES:
            raise ConfigurationError(f"{where}: more than {MAX_LEAVES} filters")
        if not isinstance(node, MetadataFilter):
            raise ConfigurationError(f"{where}: {type(node).__name__} is not a MetadataFilter")
        problem = _leaf_problem(node)
        if problem is None and known is not None:
            problem = _store_problem(node, *known)
        if problem is not None:
            raise ConfigurationError(f"{where}: {problem}")
