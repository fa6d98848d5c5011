"""Tokenizers: :class:`KiwiTokenizer` (Korean morphemes for BM25) and :func:`get_kiwi`."""

from llama_index_car.tokenizers.kiwi import KiwiTokenizer, get_kiwi

__all__ = ["KiwiTokenizer", "get_kiwi"]
