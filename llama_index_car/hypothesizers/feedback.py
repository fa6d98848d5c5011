"""Pseudo-relevance feedback: the offline query expansion of CAR, read from the top dense hits.

The offline hypothesis of :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`
is not mined from the corpus ahead of time (that design was measured to hurt both channels,
README Results): it is taken, per query, from the passages the dense channel already ranks
first. Dense retrieval bridges paraphrases that share no word with the passage; the words of
its best hits then let BM25 search in the vocabulary of the standards.

For the query tokens ``Q`` (the lexical index's own tokens), the top ``n_docs`` dense hits
``D`` and the lexical index's idf, every indexed term ``t ∉ Q`` with ``idf(t) > 0`` scores

.. math::

    w(t) = \\mathrm{idf}(t) \\cdot \\sum_{d \\in D} \\mathrm{tf}(t, d)

and the ``n_terms`` best terms (ties: term ascending) are the feedback terms, leaving out the
HTML table markup that table nodes carry (:data:`MARKUP_TOKENS`: ``td``, ``tr``, ``colspan`` …,
frequent in table nodes and rare elsewhere, so their idf would otherwise rank them high). The
feedback channel is BM25 over ``query + " " + " ".join(terms)``.

>>> feedback_terms(["비"], [{"비": 2, "우천": 3, "작업": 1}, {"우천": 1}], {"비": 1.0, "우천": 2.0, "작업": 0.5}, 1)
['우천']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llama_index_car._errors import ConfigurationError

#: dense hits read per query (top 5)
DEFAULT_FEEDBACK_DOCS = 5
#: terms added to the lexical query (10)
DEFAULT_FEEDBACK_TERMS = 10
#: tokens of the HTML tables in table nodes (Kiwi tokenizes ``<td colspan="2">`` as td, colspan)
MARKUP_TOKENS = frozenset(
    {"table", "thead", "tbody", "tr", "td", "th", "colspan", "rowspan", "br", "caption"}
)


def feedback_terms(
    query_tokens: Iterable[str],
    doc_counts: Iterable[Mapping[str, int]],
    idf: Mapping[str, float],
    n_terms: int = DEFAULT_FEEDBACK_TERMS,
) -> list[str]:
    """The ``n_terms`` terms of ``doc_counts`` with the largest ``idf × summed tf``.

    Args:
        query_tokens: the query's tokens (excluded from the result, as are
            :data:`MARKUP_TOKENS`).
        doc_counts: one ``{term: count}`` per feedback document.
        idf: idf per term; terms without an idf or with ``idf <= 0`` are skipped.
        n_terms: how many terms to return (>= 1).

    Returns:
        Terms by weight descending, then term ascending.
    """
    if isinstance(n_terms, bool) or not isinstance(n_terms, int) or n_terms < 1:
        raise ConfigurationError(f"n_terms={n_terms!r} is invalid; use an integer >= 1")
    skip = set(query_tokens) | MARKUP_TOKENS
    tf: dict[str, int] = {}
    for counts in doc_counts:
        for term, count in counts.items():
            if term not in skip:
                tf[term] = tf.get(term, 0) + int(count)
    weights = {t: idf.get(t, 0.0) * c for t, c in tf.items() if idf.get(t, 0.0) > 0 and c > 0}
    return [t for t, _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:n_terms]]
