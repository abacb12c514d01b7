"""Folding and tokens (docs/method.md §2.4): entity-key folding, word lists, negation cues."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rapidfuzz import fuzz

from factutil.filters.lexicon import RELATION_TEXT_CUTOFF

_NO_DECOMPOSITION = str.maketrans({
    "ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "æ": "ae", "Æ": "AE",
    "œ": "oe", "Œ": "OE", "þ": "th", "Þ": "Th", "ð": "d", "Ð": "D", "ı": "i", "ħ": "h",
})
_APOSTROPHES = re.compile(r"['’ʼ‘`´]")
_NON_WORD = re.compile(r"[\W_]+")


def fold(text: str) -> str:
    """Fold text for comparison: accents off, apostrophes out, punctuation to spaces, case-folded,
    single-spaced ("Xi'an" → "xian", "Armando Bó" → "armando bo", "Robbe-Grillet" → "robbe
    grillet")."""
    if text.isascii():  # nothing to translate or decompose; casefold is lower() on ASCII
        plain = text.lower()
    else:
        decomposed = unicodedata.normalize("NFKD", text.translate(_NO_DECOMPOSITION))
        plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return _NON_WORD.sub(" ", _APOSTROPHES.sub("", plain)).strip()


_WORD = re.compile(r"[^\W_]+(?:['’ʼ][^\W_]+)*")
# Word lists the other filter modules read (folded words).
ARTICLES = frozenset({"the", "a", "an"})  # dropped from entity keys and relation phrases
BE = frozenset({"is", "are", "was", "were", "be", "been", "being", "am", "s"})  # -> "be"
HAVE = frozenset({"has", "have", "had", "having"})  # -> "have"
# dropped from the start / end of a relation phrase until it matches the lexicon
LEADING_FILLERS = frozenset({"be", "have", "also", "who", "whose", "which", "that", "it", "then",
                             "later", "once", "currently", "formerly", "originally", "still"})
TRAILING_FILLERS = frozenset({"be", "have"})
# an object starting with one of these may complete the relation ("directed | by Y")
PREPOSITIONS = frozenset({"in", "on", "at", "of", "by", "to", "from", "with", "for", "into",
                          "as", "under", "after", "before"})
# words that do not make two relation texts differ (relation veto)
FUNCTION_WORDS = PREPOSITIONS | ARTICLES | {"be", "have"}

# Negation cues: words counted as one cue each; SILENT words neither cue nor stay; a contraction
# counts as a cue and leaves its verb; NEGATED_WORDS count as a cue and leave their stem;
# WHOLE_OBJECT_NEGATIONS apply when they are the object's only word.
NEGATION_WORDS = frozenset({"not", "no", "never", "without", "none", "nobody", "nothing",
                            "nowhere", "non", "nt", "cannot", "neither"})
SILENT = frozenset({"nor"})
CONTRACTIONS = {
    "isnt": "is", "arent": "are", "wasnt": "was", "werent": "were", "aint": "is",
    "dont": "do", "doesnt": "does", "didnt": "did", "hasnt": "has", "havent": "have",
    "hadnt": "had", "cant": "can", "couldnt": "could", "wont": "will", "wouldnt": "would",
    "shouldnt": "should", "mustnt": "must", "neednt": "need", "mightnt": "might",
}
# a prefixed word of the lexicon counts as one cue and is replaced by its stem
NEGATED_WORDS = {
    "false": "true", "wrong": "correct", "dead": "alive", "deceased": "alive", "unwed": "married",
    **{prefix + stem: stem for prefix, stems in (
        ("un", ("true", "married", "related", "known", "aired", "released", "published", "finished",
                "credited", "defeated", "beaten", "successful", "able", "available", "confirmed",
                "identified", "official", "opposed", "signed", "employed", "paid", "licensed",
                "named", "listed", "inhabited", "populated", "incorporated", "recognized",
                "recognised", "accredited", "elected", "ranked", "sold", "used", "built",
                "completed", "affiliated")),
        ("in", ("correct", "complete", "active", "valid", "direct", "accurate", "conclusive",
                "eligible", "solvent")),
        ("il", ("legal", "legitimate", "literate")),
        ("im", ("possible", "proper")),
        ("ir", ("regular", "relevant")),
        ("non", ("profit", "existent", "fiction", "member", "commercial")),
        ("dis", ("honest", "agree", "agreed", "approved", "allowed", "connected", "continued",
                 "similar", "loyal", "qualified", "likes", "liked")),
    ) for stem in stems},
}
WHOLE_OBJECT_NEGATIONS = {"no": "yes", "false": "true", "none": "", "never": "",
                          "nobody": "", "nothing": ""}
# The negating prefixes of the pair rule; a longer prefix first ("non" before "no" would matter).
NEGATING_PREFIXES = ("non", "dis", "un", "in", "im", "il", "ir")


def folded_words(text: str, cache: Any) -> tuple[tuple[str, bool], ...]:
    """(folded word, written in lower case) for every word; folding may split a word."""
    out = []
    for raw in _WORD.findall(text):
        if raw.isascii() and raw.isalnum():  # fold() would only lower it; upper case is A-Z
            low = raw.lower()
            out.append((low, low == raw))
            continue
        lower = not any(c.isupper() for c in raw)
        out.extend((piece, lower) for piece in cache.fold(raw).split())
    return tuple(out)


def flip_candidates(words: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(word, stem) of the words outside the lexicon with a :data:`NEGATING_PREFIXES` prefix (the
    first that matches) before a stem of >= 4 letters, sorted by word."""
    out = []
    for word in sorted(words - NEGATED_WORDS.keys()):
        for prefix in NEGATING_PREFIXES:
            if word.startswith(prefix) and len(word) - len(prefix) >= 4:
                out.append((word, word[len(prefix):]))
                break
    return tuple(out)


def similar_text(a: str, b: str) -> bool:
    """Unknown relation texts agree: ratio >= RELATION_TEXT_CUTOFF, or the content words of one
    are words of the other once inflections are cut ("launched in" ~ "launch year")."""
    if fuzz.ratio(a, b) >= RELATION_TEXT_CUTOFF:
        return True
    ta = {_stem(word) for word in a.split()} - FUNCTION_WORDS
    tb = {_stem(word) for word in b.split()} - FUNCTION_WORDS
    return bool(ta and tb) and (ta <= tb or tb <= ta)


def _stem(word: str) -> str:
    """``word`` less one inflection (-ing, -ed, -es, -s, -d) when 4 letters or more are left."""
    for ending in ("ing", "ed", "es", "s", "d"):
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    return word
