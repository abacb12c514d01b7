"""Entity keys and entity matching (docs/method.md §2.4, docs/filters.md)."""

from __future__ import annotations

import re
from typing import Any

from rapidfuzz import fuzz

from factutil.filters.lexicon import ENTITY_CUTOFF
from factutil.filters.text import ARTICLES


def same_entity(a: str, b: str, cache: Any = None) -> bool:
    """Whether two folded entity keys name the same thing (symmetric; docs/filters.md): equal
    keys, an empty key, token containment or a fuzzy ratio >= ``ENTITY_CUTOFF`` agree, unless a
    generational suffix or a qualifier's words ("paris" vs "paris, texas") are on one side only.
    ``cache``: a :class:`~factutil.filters.FilterCache`, or None."""
    if a == b or not a or not b:
        return True
    plain_a, plain_b = plain_key(a), plain_key(b)
    if plain_a == plain_b:
        return True
    ta, tb = _content(plain_a), _content(plain_b)
    if set(_suffixes(ta)) != set(_suffixes(tb)):
        return False
    if ", " in a or ", " in b:
        # The other side must hold the qualifier's words, and the heads must agree.
        for key, other in ((a, tb), (b, ta)):
            if ", " not in key:
                continue
            qualifier = [t for t in _content(key.split(", ", 1)[1]) if t not in GENERATIONAL]
            if not _contained(qualifier, other):
                return False
        heads = (a.split(", ", 1)[0], b.split(", ", 1)[0])
        return cache.same_entity(*heads) if cache is not None else same_entity(*heads)
    if _contained(ta, tb) or _contained(tb, ta):
        return True
    best = max(fuzz.ratio(plain_a, plain_b), fuzz.token_sort_ratio(plain_a, plain_b))
    return best >= ENTITY_CUTOFF


# A word standing for the first comma of a part that is followed by more words (a qualifier):
# it passes text.folded_words and the negation split of parts.py as a plain word and becomes
# ", " in the key.
_QUALIFIER_MARK = "qualifiedbycomma"
_QUALIFYING_COMMA = re.compile(r"(?<=[^\W_])[^\w,]*,(?=[^,]*?[^\W\d_])")


def mark_qualifier(text: str) -> str:
    """``text`` with its first comma after a word and before a letter replaced by the mark."""
    match = _QUALIFYING_COMMA.search(text) if "," in text else None
    if match is None:
        return text
    return f"{text[:match.end() - 1]} {_QUALIFIER_MARK} {text[match.end():]}"


def roman_numeral(number: int) -> str:
    """``number`` (0-39) in lower-case Roman numerals, the canonical form ("xiv", not "xiiii")."""
    tens, units = divmod(number, 10)
    return "x" * tens + ("", "i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix")[units]


# Generational suffixes: Jr./Sr. and the numerals of more than one letter up to 39 (I, V and X
# alone are too often initials to count).
GENERATIONAL = frozenset(
    {"jr", "sr", "jnr", "snr", *map(roman_numeral, range(2, 40))} - {"v", "x"})


def generational_suffixes(text: str, cache: Any) -> tuple[str, ...]:
    """The generational suffixes written after the first word of a part, in order."""
    return _suffixes([word for word, _ in cache.words(text)])


def _suffixes(tokens: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t for t in tokens[1:] if t in GENERATIONAL))


def plain_key(key: str) -> str:
    """An entity key without its qualifier comma ("paris, texas" -> "paris texas")."""
    return key.replace(", ", " ", 1)


def entity_key(tokens: list[str], had_values: bool, suffixes: tuple[str, ...] = ()) -> str:
    """Tokens without articles (a lone article stays unless values were taken from the part), the
    qualifier mark as ", " between a head and a qualifier, the generational ``suffixes`` last,
    sorted ("Reginar III, Count of Hainaut" -> "reginar, count of hainaut iii")."""
    kept = [t for t in tokens if t not in ARTICLES]
    kept = kept if kept or had_values else tokens
    if suffixes:
        kept = kept[:1] + [t for t in kept[1:] if t not in suffixes]
    if _QUALIFIER_MARK in kept:
        at = kept.index(_QUALIFIER_MARK)
        head = kept[:at]  # the first mark: none before it
        qualifier = [t for t in kept[at + 1 :] if t != _QUALIFIER_MARK]
        if head and qualifier:
            kept = [*head[:-1], head[-1] + ",", *qualifier]
        else:
            kept = head + qualifier
    return " ".join(kept + sorted(suffixes))


def _content(key: str) -> list[str]:
    tokens = key.split()
    return [t for t in tokens if t not in ARTICLES] or tokens


def _stem(token: str) -> str:
    """A light stem for containment: "seats", "seating" → "seat"; short words stay."""
    if len(token) > 4:
        if token.endswith("ing") and len(token) > 6:
            return token[:-3]
        if token.endswith("s") and not token.endswith("ss"):
            return token[:-1]
    return token


def _contained(short: list[str], long: list[str]) -> bool:
    if len(short) > len(long):
        return False
    pool = {_stem(t) for t in long}  # a one-letter token also matches a word it starts (initials)
    return all(_stem(token) in pool or len(token) == 1 and any(t.startswith(token) for t in long)
               for token in short)
