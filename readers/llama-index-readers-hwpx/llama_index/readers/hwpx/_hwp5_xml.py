"""XML escaping for the trees the HWP 5 modules write as text: characters XML cannot hold
dropped, markup characters escaped."""

from __future__ import annotations

import re

SURROGATE = re.compile("[\ud800-\udfff]")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: anything :func:`xml_text` would change (or a surrogate to pair): absent, text goes as is
XML_SPECIAL = re.compile("[\x00-\x08\x0b\x0c\x0d\x0e-\x1f\ud800-\udfff\ufffe\uffff&<>]")


def xml_safe(text: str) -> str:
    """Characters lxml refuses (C0 controls, lone surrogates) dropped."""
    return _XML_BAD.sub("", text) if _XML_BAD.search(text) else text


def xml_text(text: str) -> str:
    """``text`` as XML character data: characters XML cannot hold dropped, ``&<>`` escaped
    (``>`` too, so ``]]>`` never appears), carriage returns as character references."""
    text = xml_safe(text)
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    if "\r" in text:  # a parser would turn a raw carriage return into a line feed
        text = text.replace("\r", "&#13;")
    return text


def xml_attr(text: str) -> str:
    """``text`` as a double-quoted XML attribute value (whitespace kept as character
    references: a parser would normalise raw tabs and newlines to spaces)."""
    text = xml_text(text).replace('"', "&quot;")
    return text.replace("\t", "&#9;").replace("\n", "&#10;")
