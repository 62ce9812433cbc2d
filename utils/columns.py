"""Padding text to a column width as a terminal shows it: a Chinese character takes two columns, so the
headers of a table (``index``, ``expected``, ``got``; or their translations) stay above their numbers.

For text of ASCII characters :func:`ljust` and :func:`rjust` are ``str.ljust`` and ``str.rjust``, so an English
table is byte for byte what ``f"{text:<16}"`` and ``f"{text:>14}"`` give.
"""

from __future__ import annotations

import unicodedata


def width(text: str) -> int:
    """Columns ``text`` takes in a monospaced font: two for each wide (East Asian) character, one otherwise."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def ljust(text: str, columns: int) -> str:
    """``text`` followed by spaces up to ``columns`` columns (nothing added to text that is as wide already)."""
    return text + " " * max(0, columns - width(text))


def rjust(text: str, columns: int) -> str:
    """``text`` preceded by spaces up to ``columns`` columns (nothing added to text that is as wide already)."""
    return " " * max(0, columns - width(text)) + text
