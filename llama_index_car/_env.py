"""The package's environment variables: one prefix, ``LLAMA_CAR_``.

:func:`env` reads ``LLAMA_CAR_<NAME>``; the older ``CAR_<NAME>`` spellings of the variables
that had one (:data:`OLD_NAMES`) are still read when the new one is unset, with one
``DeprecationWarning`` line naming the new variable.

>>> env_name("EMBED_MODEL")
'LLAMA_CAR_EMBED_MODEL'
"""

from __future__ import annotations

import os
import warnings

PREFIX = "LLAMA_CAR_"
#: the names that were read as ``CAR_<NAME>`` before the prefix became ``LLAMA_CAR_``
OLD_NAMES = ("EMBED_MODEL", "LLM", "RERANKER", "MAX_QUERY_CHARS")


def env_name(name: str) -> str:
    """The variable ``name`` is read from: ``LLAMA_CAR_<name>``."""
    return PREFIX + name


def env(name: str) -> str | None:
    """The value of ``LLAMA_CAR_<name>`` (``None`` when unset or empty); else, for a name of
    :data:`OLD_NAMES`, of ``CAR_<name>`` with a ``DeprecationWarning``."""
    value = os.environ.get(PREFIX + name)
    if value:
        return value
    if name in OLD_NAMES:
        old = os.environ.get("CAR_" + name)
        if old:
            warnings.warn(f"CAR_{name} is deprecated; set {PREFIX}{name} instead",
                          DeprecationWarning, stacklevel=3)
            return old
    return None
