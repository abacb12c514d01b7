"""Vetoes on candidate edges: same fact, or a look-alike that means something else (docs/method.md §2.4).

The clusterer links two facts when their embeddings are close (cosine >= ``sim_threshold``); the
filters here then veto the edges whose two facts differ in meaning although they read alike.
:func:`analyze` reads one triple ONCE into a :class:`FactFeatures`; each filter is a pure function
of two features, returns a short reason when it vetoes and None when it lets the edge stand, and is
symmetric: ``veto(a, b) == veto(b, a)``, reason text included. :func:`first_veto` runs the enabled
filters in the fixed order negation, numeric, relation, entity; :func:`alike` says when no filter
can veto a pair (the two read alike in every field the filters compare), so a step skips them
there. Everything is deterministic. The
memo of the helpers is a :class:`FilterCache` that its owner holds and passes (``cache=``; the
clusterer creates one per clusterer); without one nothing is memoised and the answers are the
same. The only module state is built once from constants: the lexicon tables, each relation id's
ancestors, pint's unit registry and the factors of the whitelisted units.

The package, in the order a triple is read: :mod:`~factutil.filters.lexicon` (the relation
table and cutoffs), :mod:`~factutil.filters.text` (folding, words, negation cues),
:mod:`~factutil.filters.quantities` (numbers, dates, units), :mod:`~factutil.filters.relations`
(phrase -> relation id), :mod:`~factutil.filters.entities` (entity keys and matching),
:mod:`~factutil.filters.parts` (a subject, a relation + object -> values, keys, relation id),
:mod:`~factutil.filters.cache` (:class:`FilterCache`), :mod:`~factutil.filters.features`
(:func:`analyze`) and :mod:`~factutil.filters.vetoes` (the four filters, :func:`first_veto`);
every public name is importable from ``factutil.filters``.

Rules and decisions (each one a deliberate choice; see the tests for the cases).

Text folding
  * An entity key is the text folded for comparison: NFKD with combining marks dropped ("Armando Bó"
    = "Armando Bo"), letters without a decomposition mapped (ł→l, ø→o, æ→ae, ß→ss, đ→d, þ→th),
    apostrophes deleted ("Xi'an" = "Xian"), other punctuation turned into spaces
    ("Robbe-Grillet" = "Robbe Grillet"), case-folded, whitespace collapsed.
  * Numbers, dates, quantities and regnal numerals are taken OUT of the keys and kept in
    ``quantities``, so "12 June 1516" and "1516-06-12" have the same (empty) object key and equal
    quantities; "John V" has key "john" and quantity 5. Negation words are taken out too and
    kept in ``negated``; a prefixed word of the lexicon is replaced by its stem
    ("unmarried" → "married").

Negation (polarity)
  * Cues, counted on the relation and the object (a subject is a name and carries no polarity):
    not, no, never, n't forms (isn't, wasn't, didn't, cannot, won't …), without, none, nobody,
    nothing, nowhere, false, untrue, neither (one cue for "neither … nor"; "nor" adds none),
    "non" as a word ("non-profit"), and an explicit lexicon of prefixed words (unmarried,
    unreleased, inactive, illegal, nonprofit, dishonest, dead/deceased = not alive …) that map to
    their stem.
  * Polarity = parity of the cue count, so a double negation cancels ("not unmarried" = "married").
  * In the object, a cue counts only when written in lower case or when it is the whole object
    ("No", "False"): "Dr. No" and "False Bay" are names. A whole-object "no"/"false" becomes
    "yes"/"true" negated, so ("claim", "is", "false") has the key of ("claim", "is not", "true").
  * Words that merely start with un/in/non ("United", "inside", "under", "India") are never cues
    on their own. Beyond the lexicon, a word with a negating prefix (non-, dis-, un-, in-, im-,
    il-, ir-) whose stem (>= 4 letters) is a word of the other triple and which that triple lacks
    ("unaired" vs "aired", "ineffective" vs "effective", "inconsistent" vs "consistent") flips the
    polarity for that pair only (pair check in :func:`negation_veto`). A word whose prefix is part
    of its stem ("informed", "display") flips only against a triple holding the bare stem
    ("formed", "play"), which paraphrases rarely do (its recall cost is in benchmarks/README.md).
  * Veto when the two polarities differ.

Numeric
  * Extracted from all three parts; the relation's values join the object's. Compared part by
    part (subject with subject, object with object) in the canonical direction.
  * Spelled-out numbers go through text2num (``alpha2digit``, threshold 2: "two"… and "second"…
    become digits; "one" and "first" stay words, as they are mostly prose). "1,000" = "1000";
    "5 million" = 5000000; ordinals "8th" = 8.
  * Dates: ISO "1990-03-03"; "3 March 1990", "3rd of March, 1990", "March 3, 1990"; "March 1990"
    (partial); "3 March" / "March 3" (no year); BC/BCE make years negative, AD/CE are dropped;
    month abbreviations must be capitalised and "May" only as "May". Numeric "D/M/Y" (also with
    "." or "-"): a field > 12 fixes the order; when both fields are <= 12 the date is AMBIGUOUS:
    it agrees with an unambiguous date under either reading, and two ambiguous dates are compared
    as written (one writer, one convention). "1990s" is a decade.
  * A partial date agrees with every full date it contains ("March 1990" ~ "3 March 1990"); a bare
    integer agrees with a date of that year ("died 1516" ~ "died 12 June 1516"), and with a decade
    that holds it.
  * Roman numerals are read only as regnal numbers: I…XXXIX (letters I, V, X), upper case, right
    after a capitalised word, and not an initial ("Ștefan I. Nenițescu"). "John V" = 5 ≠
    "John VI"; "Henry VIII" = "Henry 8th". The pronoun "I" in prose is not a numeral.
  * Quantities with units go through pint, for a whitelist of unit words and symbols (pint alone
    reads prose as units: "units" = micro-nit, "acts" = atto-carat, "in" = inch): "5 km" =
    "5000 m"; "5 km" vs "5 miles" and "5 km" vs "5 kg" veto. °C/°F and percent are read
    directly. Currency symbols/codes ($, US$, €, £, ¥, USD, EUR, GBP, JPY, dollars, euros) are
    units of their own (no exchange rates); "pounds" is a mass.
  * A bare number agrees with a quantity when it equals the magnitude as written ("age | 45" ~
    "age | 45 years"); a number followed by a noun counts things ("8,000 seats") and never
    agrees with a physical quantity ("8,000 square metres").
  * Veto when both sides have values in the same part and some value of either side has no
    agreeing value on the other side. A part with values on one side only does NOT veto: it is
    missing information, not a contradiction ("has 3 children" vs "has children"); "born | 1990"
    vs "born | Paris" is left to the relation filter, which reads the first as date of birth.

Relation
  * A lexicon of about 150 relation ids (Wikidata labels, with their P-ids) lists forward and
    inverse verbalisations, built from the relations of the 2Wiki evidences and MuSiQue
    decompositions in shared/data plus common Wikidata properties. "X | father | Y" means Y is X's
    father (Wikidata direction); "Y | father of | X" is the inverse form and is swapped to
    canonical direction (``inverse=True``). Inverse property pairs share one id: capital /
    capital of, part of / has part, follows / followed by, educated at / alma mater of,
    location / contains, includes …
  * Lookup: fold, drop negation cues, map be/have forms to "be"/"have", drop the articles
    the/a/an, try the whole text, then strip leading auxiliaries and relative pronouns
    ("was born in" → "born in") and a trailing be/have ("whose mother is" → "mother").
    When the relation is bare or the object starts with a preposition, leading object words are
    moved into the relation ("X | was | born in Paris" = "X | born in | Paris";
    "X | directed | by Y" = "X | directed by | Y"). A miss is retried fuzzily (rapidfuzz ratio
    >= 92 against every verbalisation, for typos).
  * "born (in)", "died (in)", "founded (in)", "released (in)", "published (in)", "took place in" …
    name a date relation when the object holds a date or a year and a place/agent relation
    otherwise.
  * Symmetric relations (spouse, sibling, relative, cousin, shares border with, unmarried partner,
    twinned administrative body, diplomatic relation) have subject and object sorted.
  * Specific ids generalise to broader ones: son/daughter → child; father/mother → child with
    subject and object inverted (X's father Y = Y's child X); husband/wife → spouse;
    brother/sister → sibling; uncle, cousin, grandfather … → relative; country of citizenship →
    country → location; occupation/instance of → "be". Two relations agree when their ids are
    equal or one is an ancestor of the other (after the inversion); two different specific ids
    veto even under one parent (father vs mother, son vs daughter, husband vs wife).
  * A swapped subject and object under a non-symmetric relation vetoes ("A | father | B" vs
    "B | father | A"); parts are matched by entity key as in the entity filter AND by their
    values, so "Episode 2 | followed by | Episode 3" vs "Episode 2 | follows | Episode 3" vetoes.
  * Unknown relations (not in the lexicon) are compared as folded text: they agree when
    rapidfuzz ``ratio`` >= 85 ("lives in" ~ "lived in"; "won against" vs "lost against" vetoes)
    or when the content words (prepositions, articles, be/have aside) of one are all words of
    the other ("sold" ~ "records sold"); an unknown one agrees with a known id when it is that
    close to one of its verbalisations ("commemorated in" vs "location" vetoes: "in" alone is
    no content).

Entity (a fourth filter, on by default)
  * Subject keys and object keys (canonical direction, after generalisation; symmetric relations
    in either pairing) must name the same thing: equal keys; or token containment after dropping
    the/a/an, where a one-letter token matches any token with that initial and words compare by
    a light stem ("Obama" ~ "Barack Obama", "Honolulu" ~ "Honolulu, Hawaii", "Edmond T.
    Gréville" ~ "Edmond Gréville", "seats" ~ "seating places"); or rapidfuzz ``ratio`` or
    ``token_sort_ratio`` >= 88 ("Prince Ioann …" ~ "Prince John …", "German" ~ "Germany"),
    an edit-distance cutoff that keeps "Paris" vs "Pavia" (60) apart. An empty key (a part that
    was only a number or a date) agrees with any key, except that a part that is only a value
    never matches a part that is only a name ("date of death | 1983" vs "date of death |
    London"). Otherwise veto ("born in | Paris" vs "born in | Lyon"). Under a symmetric
    relation the pairing of parts that matches best is used. Known misses: exonyms and
    demonyms ("Roma" vs "Rome", "American" vs "United States") veto.
  * Two marks name another entity whatever containment or spelling says: a qualifier after a
    comma ("Paris" vs "Paris, Texas", "Honolulu" vs "Honolulu, Hawaii", "Paris, France" vs
    "Paris, Texas"; the key keeps the comma, "paris, texas") unless the other part holds the
    qualifier's words too ("Missoula, Montana" = "Missoula Montana"); and a generational suffix
    one side lacks (Jr., Sr., Jnr, Snr and the numerals II to XXXIX after a name: "Armando Bó" vs
    "Armando Bó Jr.", "Johann Strauss" vs "Johann Strauss II"; a numeral taken out as a value
    stays in the key as a word, so "Reginar III" and "Reginar Iii" agree). A comma followed only
    by a suffix or a value is no qualifier ("Martin Luther King, Jr.", "April 12, 1970").

Libraries and costs (2-core machine; 217 real 2Wiki/MuSiQue triples plus unit/date/negation
variants; figures before the caching below): analyze ≈ 40 µs per triple (48 µs with cold caches);
a pair check of all four filters
≈ 6 µs on average and ≈ 12 µs on agreeing pairs (where every filter runs); per filter
negation 2.9, numeric 2.7, relation 0.9, entity 3.9 µs per pair. Parts: text2num
``alpha2digit`` 1.2 µs per text; pint loads its registry once (~0.19 s, on the first unit seen)
and then costs 16 µs per new unit word (cached after); rapidfuzz ``ratio`` 0.13 µs,
:func:`same_entity` 7 µs uncached. python-dateutil was measured (16 µs per parse) and not used:
it cannot say which fields a partial date lacks, nor find several dates in one text; the date
regexes with calendar validation cost ≈ 10 µs per scan. number-parser was tried for number
words and not used (≈ 760 µs per text, and it reads "one of" and "Air Force One" as numbers).

Speed (results unchanged, checked by tests/test_filters_golden.py). A batch repeats
parts far more than triples (reference step L: 4,547 distinct triples, 2,354 distinct parts, 841
distinct relation + object pairs), so the analysis is memoised per part by the
:class:`FilterCache`: ``scan`` per part text, ``subject_part`` per subject, ``relation_part`` per
(relation, object), ``words`` per text (bounded LRUs with string keys). A scan skips the date and number passes when the text has
no digit, the month patterns when it has no month prefix, and the regnal pass without I/V/X;
``fold`` and ``folded_words`` skip Unicode decomposition for ASCII. Pairs: the common relation
of two ids is a table lookup, the negating-prefix candidates of a word set and entity-key matches are memoised,
and the alignment of the last pair is reused by the next filter. Measured on L (2 cores): analyze 60 → 11 µs per triple from empty caches, 3 µs with
warm ones (31 µs when no part was seen before); ``first_veto`` on the step's real candidate pairs
11 → 5.5 µs.
"""

from __future__ import annotations

from factutil.filters.cache import NO_MEMO, FilterCache
from factutil.filters.entities import GENERATIONAL, same_entity
from factutil.filters.features import FactFeatures, analyze
from factutil.filters.lexicon import (
    ENTITY_CUTOFF,
    RELATION_BY_ID,
    RELATION_LOOKUP_CUTOFF,
    RELATION_TEXT_CUTOFF,
    RELATIONS,
    Relation,
)
from factutil.filters.text import fold
from factutil.filters.vetoes import (
    DEFAULT_FILTERS,
    FILTERS,
    alike,
    entity_veto,
    first_veto,
    negation_veto,
    numeric_veto,
    relation_veto,
)

__all__ = [
    "DEFAULT_FILTERS",
    "ENTITY_CUTOFF",
    "FILTERS",
    "GENERATIONAL",
    "NO_MEMO",
    "RELATIONS",
    "RELATION_BY_ID",
    "RELATION_LOOKUP_CUTOFF",
    "RELATION_TEXT_CUTOFF",
    "FactFeatures",
    "FilterCache",
    "Relation",
    "alike",
    "analyze",
    "entity_veto",
    "first_veto",
    "fold",
    "negation_veto",
    "numeric_veto",
    "relation_veto",
    "same_entity",
]

