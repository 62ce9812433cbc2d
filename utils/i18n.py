"""The language of the helpers' messages: English as written in the code, or a gettext translation of it.

Every message a student reads from the helpers (self-check feedback and hints, input errors, the setup summary)
is written in English and marked with :func:`_` (``_("... {n} ...").format(n=n)``, never an f-string inside
``_``); so is every message of the checks that a chapter writes in its notebook (chapters 01, 02 and 08 import
``_`` and ``N_`` from here). Its translations live in one gettext catalogue per language,
``locale/<language>/LC_MESSAGES/triton_course.po``, compiled to the ``.mo`` next to it, which Python's own
:mod:`gettext` reads: nothing beyond the standard library is needed at run time. ``python -m grader
translations`` extracts the marked messages (Babel), updates the catalogues and compiles them; the test suite
fails while a message is untranslated or a ``.mo`` is older than its ``.po``.

The language is, in this order: the last :func:`set_language` (the setup cell passes its ``LANGUAGE``, which
is the notebook's edition, so a Chinese notebook speaks Chinese and one edited line switches it), the
environment variable :data:`LANGUAGE_ENV`, English.
"""

from __future__ import annotations

import gettext
import os
from pathlib import Path

#: The gettext domain of the helpers' messages.
DOMAIN = "triton_course"
#: Where the catalogues are: ``<LOCALE_DIR>/<language>/LC_MESSAGES/<DOMAIN>.mo``.
LOCALE_DIR = Path(__file__).resolve().with_name("locale")
#: The editions of the course: gettext language -> the folder of ``notebooks/`` holding that edition's
#: notebooks ("" is ``notebooks/`` itself). The first is the language the code is written in.
EDITIONS: dict[str, str] = {"en": "", "zh_CN": "zh"}
SOURCE_LANGUAGE = "en"
#: The environment variable that picks the language where no notebook set one (a script, the grader).
LANGUAGE_ENV = "TRITON_COURSE_LANGUAGE"
_ALIASES = {"zh": "zh_CN", "zh-cn": "zh_CN", "zh_cn": "zh_CN", "zh-hans": "zh_CN", "cn": "zh_CN",
            "en": "en", "en-us": "en", "en_us": "en", "en-gb": "en", "en_gb": "en", "english": "en"}

_chosen: str | None = None
_loaded: dict[str, gettext.NullTranslations] = {}


def normalise(language: str) -> str:
    """The edition's code for ``language`` (``"zh"``, ``"zh-CN"`` and ``"zh_CN"`` are ``"zh_CN"``); a clear
    ValueError names the languages there are."""
    code = _ALIASES.get(str(language).strip().lower(), str(language).strip())
    if code not in EDITIONS:
        raise ValueError(f"no course edition in {language!r}: choose one of {', '.join(map(repr, EDITIONS))}")
    return code


def set_language(language: str | None) -> str:
    """Speak ``language`` from now on (``None``: back to :data:`LANGUAGE_ENV` or English); return its code."""
    global _chosen
    _chosen = None if language is None else normalise(language)
    return current_language()


def current_language() -> str:
    """The language messages are in now."""
    if _chosen is not None:
        return _chosen
    from_env = os.environ.get(LANGUAGE_ENV, "").strip()
    if from_env:
        try:
            return normalise(from_env)
        except ValueError:
            return SOURCE_LANGUAGE
    return SOURCE_LANGUAGE


def translations(language: str | None = None) -> gettext.NullTranslations:
    """The catalogue of ``language`` (default: the current one); English, and a language whose ``.mo`` is
    missing, translate every message to itself."""
    code = normalise(language) if language is not None else current_language()
    if code not in _loaded:
        _loaded[code] = (gettext.NullTranslations() if code == SOURCE_LANGUAGE else
                         gettext.translation(DOMAIN, LOCALE_DIR, languages=[code], fallback=True))
    return _loaded[code]


def _(message: str) -> str:
    """``message`` in the current language (marks it for extraction too)."""
    return translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form of a message for the count ``n``, in the current language."""
    return translations().ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Marks ``message`` for extraction without translating it now (a constant translated where it is used)."""
    return message
