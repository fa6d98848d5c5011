"""Query–gold lexical overlap and the paper's overlap strata (§5.7).

overlap(q, g) = |M(q) ∩ M(g)| / |M(q)|, where M(·) is the *set* of Kiwi content morphemes
(:func:`surface_content_morphemes`: tags NNG NNP NR VV VA XR SL SN SH, sub-tags such as
``VV-R`` included, each as its **surface form**) and g is the gold passage as
``title + "\\n" + text``. With several relevant documents the best (largest)
overlap counts. A query without any content morpheme has overlap 0.0.

Strata, fixed before any run (boundaries exactly as in the paper):

* ``low``  — overlap ≤ 0.35
* ``mid``  — 0.35 < overlap ≤ 0.50
* ``high`` — overlap > 0.50

The stratum is decided in exact integer arithmetic on the morpheme counts, so 7/20 is ``low``
and 1/2 is ``mid`` without floating-point doubt.

>>> stratum_of(7, 20), stratum_of(1, 2), stratum_of(11, 20)
('low', 'mid', 'high')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer


#: stratum names in the paper's table order (high to low)
STRATA: tuple[str, ...] = ("high", "mid", "low")

_LOW_MAX = Fraction(35, 100)
_MID_MAX = Fraction(50, 100)

Morphemes = Callable[[str], Iterable[str]]


@dataclass(frozen=True)
class QueryOverlap:
    """Overlap of one query with its best gold document.

    Attributes:
        qid: query id.
        hits: content morphemes of the query found in the gold passage.
        total: distinct content morphemes of the query.
        gold: id of the best gold document.
    """

    qid: str
    hits: int
    total: int
    gold: str

    @property
    def value(self) -> float:
        """hits / total (0.0 when the query has no content morpheme)."""
        return self.hits / self.total if self.total else 0.0

    @property
    def stratum(self) -> str:
        """``"low"``, ``"mid"`` or ``"high"``."""
        return stratum_of(self.hits, self.total)


def stratum_of(hits: int, total: int) -> str:
    """The stratum of the exact fraction ``hits / total`` (``total == 0`` → ``"low"``)."""
    if total <= 0:
        return "low"
    frac = Fraction(hits, total)
    if frac <= _LOW_MAX:
        return "low"
    if frac <= _MID_MAX:
        return "mid"
    return "high"


def stratum(value: float) -> str:
    """The stratum of a float overlap (uses the same closed upper bounds).

    >>> stratum(0.35), stratum(0.5), stratum(0.5000001)
    ('low', 'mid', 'high')
    """
    if value <= 0.35:
        return "low"
    if value <= 0.50:
        return "mid"
    return "high"


#: the content tags of the overlap measure (``../shared/eval`` READMEs, paper §5.7)
OVERLAP_TAGS: frozenset[str] = frozenset({"NNG", "NNP", "NR", "VV", "VA", "XR", "SL", "SN", "SH"})


def surface_content_morphemes(text: str) -> list[str]:
    """Kiwi content morphemes of ``text`` as surface forms, in text order.

    The overlap definition: :meth:`KiwiTokenizer.content_morphemes
    <llama_index_car.tokenizers.kiwi.KiwiTokenizer.content_morphemes>` with its defaults
    (tags NNG NNP NR VV VA XR SL SN SH, sub-tags included, surface forms: ``따르`` rather than
    the lemma ``따르다``), which reproduces the overlap tables of the ``../shared/eval``
    READMEs exactly.

    >>> surface_content_morphemes("높은 기준을 따른다")
    ['높', '기준', '따르']
    """
    return _overlap_tokenizer().content_morphemes(text)


@lru_cache(maxsize=1)
def _overlap_tokenizer() -> KiwiTokenizer:
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    return KiwiTokenizer()


def _default_morphemes() -> Morphemes:
    return surface_content_morphemes


def overlap(query: str, passage: str, morphemes: Morphemes | None = None) -> float:
    """Share of the query's distinct content morphemes that occur in ``passage``.

    >>> overlap("a b c", "a c d", morphemes=str.split)
    0.6666666666666666
    """
    fn = morphemes or _default_morphemes()
    q = set(fn(query))
    if not q:
        return 0.0
    return len(q & set(fn(passage))) / len(q)


def compute_overlaps(
    queries: Mapping[str, str],
    corpus: Mapping[str, Mapping[str, str]],
    qrels: Mapping[str, Mapping[str, int]],
    morphemes: Morphemes | None = None,
    *,
    show_progress: bool = False,
) -> dict[str, QueryOverlap]:
    """Overlap of every query with its best relevant document (``{qid: QueryOverlap}``).

    ``corpus`` maps doc ids to ``{"title": ..., "text": ...}``; the passage is
    ``title + "\\n" + text``. Gold passages are tokenized once and reused. Ties between golds
    keep the smallest doc id.
    """
    fn = morphemes or _default_morphemes()
    cache: dict[str, set[str]] = {}
    out: dict[str, QueryOverlap] = {}
    items = list(queries.items())
    iterator: Iterable[tuple[str, str]] = items
    if show_progress:
        from tqdm.auto import tqdm

        iterator = tqdm(items, desc="overlap", unit="q")
    for qid, text in iterator:
        q = set(fn(text))
        best: QueryOverlap | None = None
        for doc_id in sorted(d for d, r in qrels.get(qid, {}).items() if r > 0):
            if doc_id not in cache:
                doc = corpus.get(doc_id, {})
                passage = f"{doc.get('title', '')}\n{doc.get('text', '')}"
                cache[doc_id] = set(fn(passage))
            cand = QueryOverlap(qid, len(q & cache[doc_id]), len(q), doc_id)
            if best is None or Fraction(cand.hits, max(cand.total, 1)) > Fraction(
                best.hits, max(best.total, 1)
            ):
                best = cand
        out[qid] = best if best is not None else QueryOverlap(qid, 0, len(q), "")
    return out


def stratify(overlaps: Mapping[str, QueryOverlap]) -> dict[str, list[str]]:
    """``{"all": [...], "high": [...], "mid": [...], "low": [...]}`` lists of qids (sorted)."""
    out: dict[str, list[str]] = {"all": sorted(overlaps)}
    for name in STRATA:
        out[name] = sorted(q for q, o in overlaps.items() if o.stratum == name)
    return out
