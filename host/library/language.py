"""The language a library is written in, as its file may say (`"language": "french"`): the one its
bits' keywords are analyzed in (host/keywords/analyzer.py). A Snowball stemmer's name (PyStemmer's
list), or `none` for words kept as they are; English when the file says nothing."""

from __future__ import annotations

import Stemmer

DEFAULT_LANGUAGE = "english"
NO_LANGUAGE = "none"
LANGUAGES = (NO_LANGUAGE, *sorted(Stemmer.algorithms()))
