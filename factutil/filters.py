"""Vetoes on candidate edges: same fact, or a look-alike that means something else (docs/method.md §2.4).

The clusterer links two facts when their embeddings are close (cosine >= ``sim_threshold``); the
filters here then veto the edges whose two facts differ in meaning although they read alike.
:func:`analyze` reads one triple ONCE into a :class:`FactFeatures`; each filter is a pure function
of two features, returns a short reason when it vetoes and None when it lets the edge stand, and is
symmetric: ``veto(a, b) == veto(b, a)``, reason text included. :func:`first_veto` runs the enabled
filters in the fixed order negation, numeric, relation, entity. Everything is deterministic; the
only module state is immutable lexicon tables plus lazily built caches (the pint unit registry,
``functools.lru_cache`` on pure helpers with string keys, the last pair's alignment).

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
    on their own. Beyond the lexicon, an un-/non- word whose stem (>= 4 letters) is a word of the
    other triple and which that triple lacks ("unaired" vs "aired") flips the polarity for that
    pair only (pair check in :func:`negation_veto`); in-/dis-/im- are too often part of the stem
    ("informed", "display"), so those count only through the lexicon.
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
distinct relation + object pairs), so the analysis is cached per part: ``_scan`` per part text,
``_subject_part`` per subject, ``_relation_part`` per (relation, object), ``_words`` per text (all
bounded LRU caches with string keys). A scan skips the date and number passes when the text has
no digit, the month patterns when it has no month prefix, and the regnal pass without I/V/X;
``fold`` and ``_words`` skip Unicode decomposition for ASCII. Pairs: ``_common_relation`` and the
un-/non- candidates of a word set are cached, and the alignment of the last pair is reused by the
next filter. Measured on L (2 cores): analyze 60 → 11 µs per triple from empty caches, 3 µs with
warm ones (31 µs when no part was seen before); ``first_veto`` on the step's real candidate pairs
11 → 5.5 µs.
"""

from __future__ import annotations

import calendar
import decimal
import math
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from rapidfuzz import fuzz, process
from text_to_num import alpha2digit

__all__ = [
    "DEFAULT_FILTERS",
    "FILTERS",
    "RELATIONS",
    "FactFeatures",
    "Relation",
    "analyze",
    "entity_veto",
    "first_veto",
    "fold",
    "negation_veto",
    "numeric_veto",
    "relation_veto",
    "same_entity",
]

# Cutoffs (rapidfuzz scores, 0..100), documented in the module docstring.
ENTITY_CUTOFF = 88.0
RELATION_TEXT_CUTOFF = 85.0
RELATION_LOOKUP_CUTOFF = 92.0
_REL_TOL = 1e-6


# --------------------------------------------------------------------------------------------
# Relation lexicon
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Relation:
    """One lexicon entry: a relation id with its verbalisations.

    ``forward`` texts read "subject REL object" in the id's direction; ``inverse`` texts read it
    with subject and object swapped. ``general`` names a broader id and ``general_inverted`` says
    whether subject and object swap on the way up (father → child). ``dated`` marks relations whose
    object is a date.
    """

    id: str
    pid: str
    forward: tuple[str, ...]
    inverse: tuple[str, ...] = ()
    symmetric: bool = False
    general: str | None = None
    general_inverted: bool = False
    dated: bool = False


def _split(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(";") if v.strip())


def _r(id_, pid, forward, inverse="", *, sym=False, gen=None, inv_gen=False, dated=False):
    """A lexicon entry; verbalisations are ';'-separated, the id is a forward one too."""
    return Relation(id_, pid, (id_, *_split(forward)), _split(inverse), sym, gen, inv_gen, dated)


RELATIONS: tuple[Relation, ...] = (
    # copula / possession pseudo-relations
    _r("be", "", "is; are; was; were; been; being; am; is a; is an"),
    _r("have", "", "has; had; having; possesses; possess"),
    # birth, death, burial
    _r("place of birth", "P19", "birthplace; birth place; born in; born at; born;"
       " place of birth is; native of; born in the city of", "birthplace of; place of birth of"),
    _r("date of birth", "P569", "born on; born in; born; birth date; birthdate; date born;"
       " year of birth; birth year; dob; date of birth is", dated=True),
    _r("place of death", "P20", "died in; died at; death place; deathplace; died; passed away in;"
       " passed away at; killed in; place of death is; location of death",
       "place of death of"),
    _r("date of death", "P570", "died on; died in; died; death date; date died; year of death;"
       " death year; passed away; passed away on; passed away in; killed in; dod", dated=True),
    _r("cause of death", "P509", "died of; died from; death cause; killed by disease"),
    _r("place of burial", "P119", "buried in; buried at; burial place; resting place;"
       " interred in; interred at; grave; burial site", "burial place of"),
    _r("killed by", "P157", "murdered by; assassinated by; killer; slain by; shot by",
       "killed; murdered; assassinated; killer of; slew; shot"),
    # family
    _r("father", "P22", "dad; has father; father is", "father of", gen="child", inv_gen=True),
    _r("mother", "P25", "mom; mum; has mother; mother is", "mother of", gen="child",
       inv_gen=True),
    _r("child", "P40", "children; has child; has children; offspring; kid; kids; parent of;"
       " father or mother of", "child of; children of; parent; parents; has parent;"
       " offspring of; kid of"),
    _r("son", "", "sons; has son", "son of", gen="child"),
    _r("daughter", "", "daughters; has daughter", "daughter of", gen="child"),
    _r("spouse", "P26", "married to; married; wed; wedded to; spouse of; spouses; husband or wife;"
       " is married to; marriage to", sym=True),
    _r("husband", "", "has husband", "husband of", gen="spouse"),
    _r("wife", "", "has wife", "wife of", gen="spouse"),
    _r("unmarried partner", "P451", "partner; domestic partner; companion; boyfriend;"
       " girlfriend; partner of; lover; in a relationship with", sym=True),
    _r("sibling", "P3373", "siblings; sibling of; brother or sister", sym=True),
    _r("brother", "", "brothers; has brother", "brother of", gen="sibling"),
    _r("sister", "", "sisters; has sister", "sister of", gen="sibling"),
    _r("relative", "P1038", "relatives; related to; relative of; kin; kinsman; family member",
       sym=True),
    _r("cousin", "", "cousins; cousin of", sym=True, gen="relative"),
    _r("uncle", "", "has uncle", "uncle of", gen="relative"),
    _r("aunt", "", "has aunt", "aunt of", gen="relative"),
    _r("nephew", "", "has nephew", "nephew of", gen="relative"),
    _r("niece", "", "has niece", "niece of", gen="relative"),
    _r("grandfather", "", "has grandfather", "grandfather of", gen="relative"),
    _r("grandmother", "", "has grandmother", "grandmother of", gen="relative"),
    _r("grandson", "", "has grandson", "grandson of", gen="relative"),
    _r("granddaughter", "", "has granddaughter", "granddaughter of", gen="relative"),
    _r("grandchild", "", "grandchildren", "grandchild of", gen="relative"),
    _r("stepfather", "", "step father", "stepfather of", gen="relative"),
    _r("stepmother", "", "step mother", "stepmother of", gen="relative"),
    _r("father in law", "", "father-in-law", "father in law of", gen="relative"),
    _r("mother in law", "", "mother-in-law", "mother in law of", gen="relative"),
    _r("son in law", "", "son-in-law", "son in law of", gen="relative"),
    _r("daughter in law", "", "daughter-in-law", "daughter in law of", gen="relative"),
    _r("brother in law", "", "brother-in-law", "brother in law of", gen="relative"),
    _r("sister in law", "", "sister-in-law", "sister in law of", gen="relative"),
    _r("half brother", "", "half-brother", "half brother of", gen="relative"),
    _r("half sister", "", "half-sister", "half sister of", gen="relative"),
    # creative works
    _r("director", "P57", "directed by; film director; director is; directors; has director",
       "director of; directed; directs; directed the film; was director of"),
    _r("cast member", "P161", "starring; stars; starred; cast; actor; actress; actors;"
       " cast members; starring actor; featuring actor",
       "starred in; stars in; acted in; appeared in; cast member of; actor in; actress in;"
       " appears in; played in; cast in; starring in"),
    _r("screenwriter", "P58", "screenplay by; written for the screen by; scriptwriter;"
       " script by; screenwriters", "wrote the screenplay for; wrote the screenplay of;"
       " screenwriter of; wrote screenplay for; scripted"),
    _r("producer", "P162", "produced by; producers", "produced; producer of; produces"),
    _r("executive producer", "P1431", "executive produced by", "executive producer of"),
    _r("composer", "P86", "composed by; music by; music composed by; score by",
       "composed; composer of; composes; wrote the music for; scored"),
    _r("lyrics by", "P676", "lyricist; words by; lyrics written by",
       "wrote the lyrics for; lyricist of; wrote lyrics for"),
    _r("performer", "P175", "performed by; sung by; recorded by; artist; singer; performers;"
       " song by; album by", "performed; performer of; sang; recorded; sings; performs"),
    _r("author", "P50", "written by; writer; authored by; authors; novel by; book by",
       "author of; wrote; writes; authored; writer of"),
    _r("creator", "P170", "created by; made by; creators", "created; creator of; creates; made"),
    _r("director of photography", "P344", "cinematographer; cinematography by; photographed by",
       "cinematographer of; director of photography of"),
    _r("film editor", "P1040", "editor; edited by", "edited; editor of; edits"),
    _r("voice actor", "P725", "voiced by; voice; voice cast", "voiced; voice actor of; voices"),
    _r("characters", "P674", "character; features character; has character",
       "present in work; appears in work; character in; character of"),
    _r("narrative location", "P840", "set in; takes place in; setting; set at"),
    _r("filming location", "P915", "filmed in; filmed at; shot in; shot at; shooting location"),
    _r("based on", "P144", "adapted from; adaptation of; inspired by",
       "adapted into; basis for; adapted as; derivative work"),
    _r("genre", "P136", "music genre; film genre; genres; type of music"),
    _r("record label", "P264", "label; signed to; signed with; record company"),
    _r("original broadcaster", "P449", "broadcaster; aired on; broadcast on; network;"
       " original network; channel; airs on", "broadcast; aired; airs"),
    _r("production company", "P272", "studio; produced by company; production companies"),
    _r("distributor", "P750", "distributed by; distribution company",
       "distributed; distributes; distributor of"),
    _r("publisher", "P123", "published by; publishing house",
       "published; publishes; publisher of"),
    _r("published in", "P1433", "appeared in journal; published in journal"),
    _r("publication date", "P577", "published on; published in; published; release date;"
       " released on; released in; released; date of publication; date of release;"
       " year of publication; publication year; first published; came out; came out in;"
       " released date; premiered; premiered on; premiered in", dated=True),
    _r("country of origin", "P495", "origin country; originates from; originated in;"
       " released in; country of production", gen="country"),
    _r("notable work", "P800", "notable works; known for; famous for; best known for;"
       " magnum opus; major work"),
    _r("original language of film or tv show", "P364", "original language",
       gen="language of work or name"),
    _r("language of work or name", "P407", "language; in language; language of work;"
       " written in language"),
    _r("native language", "P103", "mother tongue; first language",
       gen="languages spoken written or signed"),
    _r("languages spoken written or signed", "P1412", "languages spoken; speaks;"
       " language spoken; speaks language; languages"),
    _r("official language", "P37", "official languages"),
    _r("instrument", "P1303", "plays instrument; played instrument; instruments"),
    _r("follows", "P155", "preceded by; comes after; predecessor; successor of; succeeded;"
       " succeeds; replaced; sequel to; sequel of; next after",
       "followed by; succeeded by; precedes; preceded; comes before; successor; predecessor of;"
       " replaced by; prequel to; sequel; prequel of"),
    _r("influenced by", "P737", "influence; inspired", "influenced"),
    # organisations, places
    _r("founded by", "P112", "founder; founders; established by; co founded by; cofounded by;"
       " started by; set up by", "founded; founder of; established; co founded; cofounded;"
       " started; set up; co founder of; cofounder of"),
    _r("inception", "P571", "founded; founded in; founded on; established; established in;"
       " established on; formed in; formed; founding date; date founded; year founded;"
       " date of establishment; creation date; created in; built in; opened in; opened;"
       " built; year of foundation; foundation date", dated=True),
    _r("dissolved abolished or demolished date", "P576", "dissolved; dissolved in;"
       " dissolution date; abolished; abolished in; disestablished; demolished; demolished in;"
       " closed in; defunct since; date of dissolution", dated=True),
    _r("start time", "P580", "start date; started on; began; began in; began on; started in",
       dated=True),
    _r("end time", "P582", "end date; ended; ended on; ended in; finished in", dated=True),
    _r("point in time", "P585", "date; happened on; occurred on; took place on; happened in;"
       " occurred in; took place in; held on; held in; happened; occurred; when", dated=True),
    _r("location of formation", "P740", "formed in; founded in; established in;"
       " place of formation; formed at; founded at", gen="location"),
    _r("headquarters location", "P159", "headquarters; headquartered in; headquartered at;"
       " headquarters in; hq; head office; based in; headquarter", "headquarters of",
       gen="location"),
    _r("location", "P276", "located in; located at; situated in; situated at; located;"
       " lies in; in; at; built in; held in; took place in; site; venue; opened in; created in",
       "location of; site of; home to; venue of; contains; includes; encompasses",
       gen="be"),
    _r("located in the administrative territorial entity", "P131",
       "located in administrative territorial entity; administrative territorial entity;"
       " in administrative territorial entity; administrative division",
       "contains administrative territorial entity; contains the administrative territorial"
       " entity; contains administrative division", gen="location"),
    _r("country", "P17", "located in country; in country; country is; nation; sovereign state",
       gen="location"),
    _r("country of citizenship", "P27", "citizenship; citizen of; nationality; national of;"
       " citizen; holds citizenship of; citizenship of", gen="country"),
    _r("continent", "P30", "located on continent; on continent; located on the continent",
       gen="location"),
    _r("located in or next to body of water", "P206", "body of water; next to body of water;"
       " located next to body of water; located on body of water; on the shore of; lies on",
       gen="location"),
    _r("shares border with", "P47", "shares a border with; borders; bordered by; adjacent to;"
       " neighbours; neighbors; bordering; border with; neighbor of; neighbour of; border",
       sym=True),
    _r("capital", "P36", "capital city; has capital; capital is; seat of government",
       "capital of; capital city of; is capital of; seat of government of"),
    _r("part of", "P361", "is part of; belongs to; component of; section of; piece of",
       "has part; has parts; consists of; comprises; made up of; part"),
    _r("part of the series", "P179", "series; part of series; in series; installment of",
       gen="part of"),
    _r("instance of", "P31", "type; is a type of; category; is instance of; instance",
       gen="be"),
    _r("subclass of", "P279", "type of; kind of; sort of; is a kind of; subtype of",
       gen="be"),
    _r("applies to jurisdiction", "P1001", "jurisdiction; applies to; valid in"),
    _r("licensed to broadcast to", "P1408", "licensed to; broadcasts to; serves; service area"),
    _r("mouth of the watercourse", "P403", "mouth of watercourse; mouth; flows into;"
       " drains into; empties into; discharges into; tributary of; outflows into"),
    _r("origin of the watercourse", "P885", "source of the watercourse; source; rises in;"
       " river source"),
    _r("head of government", "P6", "mayor; prime minister; governor; premier; chancellor",
       "mayor of; prime minister of; head of government of; governor of; premier of;"
       " chancellor of"),
    _r("head of state", "P35", "president; king; monarch; queen; emperor; ruler; sovereign",
       "president of; king of; head of state of; monarch of; queen of; ruler of;"
       " emperor of; ruled"),
    _r("population", "P1082", "number of inhabitants; inhabitants; has population;"
       " population of; residents"),
    _r("area", "P2046", "surface area; total area; covers; size"),
    _r("elevation above sea level", "P2044", "elevation; altitude; height above sea level;"
       " elevation above sea"),
    _r("height", "P2048", "tall; is tall; stands"),
    _r("length", "P2043", "long; is long"),
    _r("duration", "P2047", "runtime; running time; run time; lasts; lasted"),
    _r("number of deaths", "P1120", "death toll; deaths; fatalities; number of fatalities;"
       " people killed"),
    _r("box office", "P2142", "grossed; gross; earned; box office gross"),
    _r("cost", "P2130", "budget; costs; cost of production"),
    _r("owned by", "P127", "owner; owners; property of", "owns; owner of; owned"),
    _r("parent organization", "P749", "parent company; subsidiary of; division of; unit of;"
       " parent organisation", "subsidiary; subsidiaries; has subsidiary;"
       " parent organization of; parent company of; parent organisation of"),
    _r("manufacturer", "P176", "manufactured by; built by; maker",
       "manufactured; manufactures; makes; manufacturer of"),
    _r("developer", "P178", "developed by", "developed; developer of; develops"),
    _r("designed by", "P287", "designer", "designed; designer of; designs"),
    _r("architect", "P84", "architects; architect is", "architect of", gen="designed by"),
    _r("chairperson", "P488", "chairman; chair; chairwoman; chaired by",
       "chairperson of; chairman of; chairs; chaired; chairwoman of"),
    _r("chief executive officer", "P169", "ceo; chief executive",
       "ceo of; chief executive officer of; chief executive of"),
    _r("head coach", "P286", "coach; coached by; manager; managed by",
       "coach of; head coach of; coached; coaches; manager of; managed; manages"),
    _r("employer", "P108", "employed by; works for; worked for; work for; employee of;"
       " worked at; works at; employed at", "employs; employed; employer of"),
    _r("educated at", "P69", "studied at; attended; alumnus of; alumna of; alumni of;"
       " graduated from; graduate of; went to; school; alma mater; student at; studied in;"
       " college; university", "alma mater of; school of; attended by"),
    _r("student of", "P1066", "studied under; trained under; pupil of; apprentice of;"
       " disciple of; teacher; mentor; teachers; mentored by; taught by",
       "teacher of; mentor of; taught; trained; student; students; pupil; pupils; mentored"),
    _r("doctoral advisor", "P184", "phd advisor; doctoral supervisor; supervisor; advisor",
       "doctoral student; doctoral students; phd student; phd students; supervised; advised",
       gen="student of"),
    _r("occupation", "P106", "profession; job; works as; worked as; career; occupations",
       gen="be"),
    _r("position held", "P39", "position; held position; served as; office held; office;"
       " held office; post"),
    _r("field of work", "P101", "field; works in field; research field; area of expertise;"
       " specialty; specialization; discipline"),
    _r("member of", "P463", "belongs to organization; membership; member"),
    _r("member of political party", "P102", "political party; party; party affiliation",
       gen="member of"),
    _r("member of sports team", "P54", "sports team; team; plays for; played for; club;"
       " member of team; team member of; signed for", gen="member of"),
    _r("league", "P118", "plays in league; competes in; league of"),
    _r("home venue", "P115", "home ground; stadium; plays at; home stadium; home arena"),
    _r("sport", "P641", "plays sport; sports"),
    _r("position played on team speciality", "P413", "position played; plays as;"
       " playing position; played as"),
    _r("conflict", "P607", "participated in conflict; fought in; war; battle"),
    _r("participant", "P710", "participants; participating; competitors",
       "participated in; participant in; took part in; competed in; participant of"),
    _r("award received", "P166", "award; awards; won; won award; received award; awarded;"
       " recipient of; winner of; honored with; honoured with; received; won the award;"
       " prize; awarded the", "awarded to; given to; received by; won by; winner; winners;"
       " recipient; recipients"),
    _r("nominated for", "P1411", "nomination; nominee for; nominated; nominations",
       "nominee; nominees"),
    _r("religion", "P140", "religious affiliation; faith; religion or worldview; believes in"),
    _r("ethnic group", "P172", "ethnicity; ethnic origin"),
    _r("sex or gender", "P21", "gender; sex"),
    _r("named after", "P138", "named for; eponym; namesake; name origin", "namesake of"),
    _r("residence", "P551", "lives in; lived in; resides in; resided in; resident of; home;"
       " living in; lives at; lived at; residence of"),
    _r("work location", "P937", "worked in; works in; place of work; workplace"),
    _r("medical condition", "P1050", "suffers from; suffered from; diagnosed with; disease;"
       " illness"),
    _r("convicted of", "P1399", "found guilty of; conviction"),
    _r("twinned administrative body", "P190", "sister city; twin town; twinned with;"
       " twin city; sister cities; sister city of; twin town of", sym=True),
    _r("diplomatic relation", "P530", "diplomatic relations with; diplomatic relations",
       sym=True),
    _r("architectural style", "P149", "building style"),
    _r("movement", "P135", "art movement; artistic movement"),
)

RELATION_BY_ID: dict[str, Relation] = {rel.id: rel for rel in RELATIONS}


# --------------------------------------------------------------------------------------------
# Folding and tokens
# --------------------------------------------------------------------------------------------

_NO_DECOMPOSITION = str.maketrans({
    "ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "æ": "ae", "Æ": "AE",
    "œ": "oe", "Œ": "OE", "þ": "th", "Þ": "Th", "ð": "d", "Ð": "D", "ı": "i", "ħ": "h",
})
_APOSTROPHES = re.compile(r"['’ʼ‘`´]")
_NON_WORD = re.compile(r"[\W_]+")


@lru_cache(maxsize=65536)
def fold(text: str) -> str:
    """Fold text for comparison: accents off, apostrophes out, punctuation to spaces, case-folded.

    Args:
        text: any string.

    Returns:
        The folded string, single-spaced and stripped ("Xi'an" → "xian", "Armando Bó" →
        "armando bo", "Robbe-Grillet" → "robbe grillet").
    """
    if text.isascii():  # nothing to translate or decompose; casefold is lower() on ASCII
        plain = text.lower()
    else:
        decomposed = unicodedata.normalize("NFKD", text.translate(_NO_DECOMPOSITION))
        plain = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return _NON_WORD.sub(" ", _APOSTROPHES.sub("", plain)).strip()


_WORD = re.compile(r"[^\W_]+(?:['’ʼ][^\W_]+)*")
_ARTICLES = frozenset({"the", "a", "an"})
_BE = frozenset({"is", "are", "was", "were", "be", "been", "being", "am", "s"})
_HAVE = frozenset({"has", "have", "had", "having"})
_LEADING_FILLERS = frozenset({"be", "have", "also", "who", "whose", "which", "that", "it", "then",
                              "later", "once", "currently", "formerly", "originally", "still"})
_FUNCTION_WORDS = frozenset({"be", "have", "the", "a", "an", "in", "on", "at", "of", "by", "to",
                             "from", "with", "for", "into", "as", "under", "after", "before"})
_TRAILING_FILLERS = frozenset({"be", "have"})
_PREPOSITIONS = frozenset({"in", "on", "at", "of", "by", "to", "from", "with", "for", "into",
                           "as", "under", "after", "before"})

# negation cues
_NEGATION_WORDS = frozenset({"not", "no", "never", "without", "none", "nobody", "nothing",
                             "nowhere", "non", "nt", "cannot", "neither"})
_SILENT = frozenset({"nor"})
_CONTRACTIONS = {
    "isnt": "is", "arent": "are", "wasnt": "was", "werent": "were", "aint": "is",
    "dont": "do", "doesnt": "does", "didnt": "did", "hasnt": "has", "havent": "have",
    "hadnt": "had", "cant": "can", "couldnt": "could", "wont": "will", "wouldnt": "would",
    "shouldnt": "should", "mustnt": "must", "neednt": "need", "mightnt": "might",
}
# a prefixed word of the lexicon counts as one cue and is replaced by its stem
_NEGATED_WORDS = {
    "false": "true", "untrue": "true", "incorrect": "correct", "wrong": "correct",
    "dead": "alive", "deceased": "alive",
    "unmarried": "married", "unwed": "married", "unrelated": "related", "unknown": "known",
    "unaired": "aired", "unreleased": "released", "unpublished": "published",
    "unfinished": "finished", "uncredited": "credited", "undefeated": "defeated",
    "unbeaten": "beaten", "unsuccessful": "successful", "unable": "able",
    "unavailable": "available", "unconfirmed": "confirmed", "unidentified": "identified",
    "unofficial": "official", "unopposed": "opposed", "unsigned": "signed",
    "unemployed": "employed", "unpaid": "paid", "unlicensed": "licensed", "unnamed": "named",
    "unlisted": "listed", "uninhabited": "inhabited", "unpopulated": "populated",
    "unincorporated": "incorporated", "unrecognized": "recognized",
    "unrecognised": "recognised", "unaccredited": "accredited", "unelected": "elected",
    "unranked": "ranked", "unsold": "sold", "unused": "used", "unbuilt": "built",
    "uncompleted": "completed", "incomplete": "complete", "unaffiliated": "affiliated",
    "inactive": "active", "invalid": "valid", "indirect": "direct", "inaccurate": "accurate",
    "inconclusive": "conclusive", "ineligible": "eligible", "insolvent": "solvent",
    "illegal": "legal", "illegitimate": "legitimate", "illiterate": "literate",
    "impossible": "possible", "improper": "proper", "irregular": "regular",
    "irrelevant": "relevant", "nonprofit": "profit", "nonexistent": "existent",
    "nonfiction": "fiction", "nonmember": "member", "noncommercial": "commercial",
    "dishonest": "honest", "disagree": "agree", "disagreed": "agreed",
    "disapproved": "approved", "disallowed": "allowed", "disconnected": "connected",
    "discontinued": "continued", "dissimilar": "similar", "disloyal": "loyal",
    "disqualified": "qualified", "dislikes": "likes", "disliked": "liked",
}
_WHOLE_OBJECT_NEGATIONS = {"no": "yes", "false": "true", "none": "", "never": "",
                           "nobody": "", "nothing": ""}
_DYNAMIC_PREFIXES = ("non", "un")


@lru_cache(maxsize=16384)
def _words(text: str) -> tuple[tuple[str, bool], ...]:
    """(folded word, written in lower case) for every word; folding may split a word."""
    out = []
    for raw in _WORD.findall(text):
        if raw.isascii() and raw.isalnum():  # fold() would only lower it; upper case is A-Z
            low = raw.lower()
            out.append((low, low == raw))
            continue
        # str.islower() is False as soon as one character is upper case, so a True skips the scan
        lower = raw.islower() or not any(c.isupper() for c in raw)
        for piece in fold(raw).split():
            out.append((piece, lower))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Numbers, dates, quantities
# --------------------------------------------------------------------------------------------

_MONTH_NUMBER = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
_MON = (r"(?P<mon>(?i:january|february|march|april|june|july|august|september|october|"
        r"november|december)|May|MAY|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?)")
_ERA = r"(?:\s*(?P<era>BCE|BC|B\.C\.|AD|A\.D\.|CE))?"
_ORD = r"(?:st|nd|rd|th)?"
_DATE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("ymd", r"(?<![\d.,/-])(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})(?![\d-])"),
        ("ymd", r"(?<![\d.,/-])(?P<y>\d{4})/(?P<m>\d{1,2})/(?P<d>\d{1,2})(?![\d/])"),
        ("num", (r"(?<![\d.,/-])(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)"
                 r"(?P<y>\d{4})(?![\d])")),
        ("dmy", rf"\b(?P<d>\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MON},?\s+(?P<y>\d{{1,4}})\b{_ERA}"),
        ("mdy", rf"\b{_MON}\s+(?P<d>\d{{1,2}}){_ORD},?\s+(?P<y>\d{{1,4}})\b{_ERA}"),
        ("my", rf"\b{_MON},?\s+(?:of\s+)?(?P<y>\d{{3,4}})\b{_ERA}"),
        ("dm", rf"\b(?P<d>\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MON}\b"),
        ("md", rf"\b{_MON}\s+(?P<d>\d{{1,2}}){_ORD}\b(?![.,]?\d)"),
    )
)
# a necessary condition for _MON (each alternative starts with one of these, same case rules)
_MONTH_HINT = re.compile(r"(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)")
_DECADE = re.compile(r"(?<![\w.])(?P<y>\d{2,3}0)['’]?s\b")
_ERA_YEAR = re.compile(
    r"(?<![\w.])(?:(?P<y1>\d{1,4})\s*(?P<era>BCE|BC|B\.C\.|AD|A\.D\.|CE)\b"
    r"|(?P<pre>AD|A\.D\.)\s*(?P<y2>\d{1,4})\b)"
)
_CURRENCY_PREFIX = {"$": "USD", "us$": "USD", "usd": "USD", "€": "EUR", "eur": "EUR",
                    "£": "GBP", "gbp": "GBP", "¥": "JPY", "jpy": "JPY"}
_CURRENCY_WORDS = {"dollar": "USD", "dollars": "USD", "usd": "USD", "euro": "EUR",
                   "euros": "EUR", "eur": "EUR", "gbp": "GBP", "pounds sterling": "GBP",
                   "yen": "JPY", "jpy": "JPY"}
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "mn": 1e6,
           "bn": 1e9, "m": 1e6, "k": 1e3}
_NUMBER = re.compile(
    r"(?<![\w.])(?P<cur>US\$|\$|€|£|¥|(?:USD|EUR|GBP|JPY)\s?)?"
    r"(?P<sign>[-−])?(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?(?P<exp>[eE][-+]?\d+\b)?"
    r"(?:(?P<ord>st|nd|rd|th)\b)?"
    r"(?:\s*(?P<scale>thousand|million|billion|trillion|bn|mn)\b)?"
)
_UNIT_AFTER = re.compile(
    r"(?:\s?-?\s?)(?P<u1>°\s?[CF]\b|%|[A-Za-zµμ°]+(?:[²³]|\^?[23](?![\d]))?(?:/[A-Za-z]+)?)"
    r"(?:\s+(?P<u2>[A-Za-z]+))?"
)
# Unit words accepted after a number; pint gives each one's dimension and factor to base units.
# A whitelist, because pint also reads prose ("units" = micro-nit, "acts" = atto-carat).
_UNIT_SYMBOLS: dict[str, str] = {  # case-sensitive
    "m": "meter", "km": "kilometer", "cm": "centimeter", "mm": "millimeter", "µm": "micrometer",
    "μm": "micrometer", "nm": "nanometer", "mi": "mile", "ft": "foot", "yd": "yard",
    "nmi": "nautical_mile", "kg": "kilogram", "g": "gram", "mg": "milligram", "lb": "pound",
    "lbs": "pound", "oz": "ounce", "ha": "hectare", "L": "liter", "l": "liter",
    "ml": "milliliter", "mL": "milliliter", "hl": "hectoliter", "hL": "hectoliter",
    "gal": "gallon", "bbl": "barrel", "h": "hour",
    "hr": "hour", "hrs": "hour", "min": "minute", "mins": "minute", "sec": "second",
    "ms": "millisecond", "km/h": "kilometer/hour", "kph": "kilometer/hour", "kmh": "kilometer/hour",
    "mph": "mile/hour", "m/s": "meter/second", "kn": "knot", "W": "watt", "kW": "kilowatt",
    "MW": "megawatt", "GW": "gigawatt", "hp": "horsepower", "J": "joule", "kJ": "kilojoule",
    "kWh": "kilowatt_hour", "kcal": "kilocalorie", "Hz": "hertz", "kHz": "kilohertz",
    "MHz": "megahertz", "GHz": "gigahertz", "KB": "kilobyte", "kB": "kilobyte",
    "MB": "megabyte", "GB": "gigabyte", "TB": "terabyte", "V": "volt", "kV": "kilovolt",
    "mA": "milliampere", "Pa": "pascal", "kPa": "kilopascal", "hPa": "hectopascal",
    "atm": "atmosphere", "psi": "psi", "km2": "kilometer**2", "km²": "kilometer**2",
    "m2": "meter**2", "m²": "meter**2", "mi2": "mile**2", "mi²": "mile**2", "m3": "meter**3",
    "m³": "meter**3", "km3": "kilometer**3", "km³": "kilometer**3", "ft2": "foot**2",
    "ft²": "foot**2", "sq km": "kilometer**2", "sq mi": "mile**2", "sq ft": "foot**2",
    "sq m": "meter**2", "t": "metric_ton",
}
_UNIT_NAMES: dict[str, str] = {  # case-insensitive, singular and plural
    "metre": "meter", "meter": "meter", "kilometre": "kilometer", "kilometer": "kilometer",
    "centimetre": "centimeter", "centimeter": "centimeter", "millimetre": "millimeter",
    "millimeter": "millimeter", "mile": "mile", "foot": "foot", "feet": "foot",
    "inch": "inch", "inches": "inch", "yard": "yard", "nautical mile": "nautical_mile",
    "kilogram": "kilogram", "kilogramme": "kilogram", "gram": "gram", "gramme": "gram",
    "milligram": "milligram", "tonne": "metric_ton", "metric ton": "metric_ton", "ton": "ton",
    "ounce": "ounce", "pound": "pound", "stone": "stone", "hectare": "hectare", "acre": "acre",
    "litre": "liter",
    "liter": "liter", "millilitre": "milliliter", "milliliter": "milliliter",
    "hectolitre": "hectoliter", "hectoliter": "hectoliter",
    "gallon": "gallon", "barrel": "barrel", "hour": "hour", "minute": "minute",
    "second": "second", "millisecond": "millisecond", "day": "day", "week": "week",
    "month": "month", "year": "year", "decade": "decade", "century": "century",
    "centuries": "century", "knot": "knot", "watt": "watt", "kilowatt": "kilowatt",
    "megawatt": "megawatt", "gigawatt": "gigawatt", "horsepower": "horsepower",
    "joule": "joule", "calorie": "calorie", "kilocalorie": "kilocalorie", "hertz": "hertz",
    "kilohertz": "kilohertz", "megahertz": "megahertz", "gigahertz": "gigahertz",
    "byte": "byte", "kilobyte": "kilobyte", "megabyte": "megabyte", "gigabyte": "gigabyte",
    "terabyte": "terabyte", "volt": "volt", "kilovolt": "kilovolt", "pascal": "pascal",
    "atmosphere": "atmosphere", "degree": "degree", "kelvin": "kelvin",
    "square kilometre": "kilometer**2", "square kilometer": "kilometer**2",
    "square metre": "meter**2", "square meter": "meter**2", "square mile": "mile**2",
    "square foot": "foot**2", "square feet": "foot**2", "cubic metre": "meter**3",
    "cubic meter": "meter**3", "kilometres per hour": "kilometer/hour",
    "kilometers per hour": "kilometer/hour", "miles per hour": "mile/hour",
    "metres per second": "meter/second", "meters per second": "meter/second",
    "year old": "year", "years old": "year",
}
# label, dimension, factor to base units, offset added before the factor
_SPECIAL_UNITS: dict[str, tuple[str, str, float, float]] = {
    "%": ("%", "percent", 1.0, 0.0), "percent": ("%", "percent", 1.0, 0.0),
    "per cent": ("%", "percent", 1.0, 0.0), "pct": ("%", "percent", 1.0, 0.0),
    "°c": ("°C", "[temperature]", 1.0, 273.15), "° c": ("°C", "[temperature]", 1.0, 273.15),
    "degrees celsius": ("°C", "[temperature]", 1.0, 273.15),
    "degree celsius": ("°C", "[temperature]", 1.0, 273.15),
    "°f": ("°F", "[temperature]", 5 / 9, 459.67), "° f": ("°F", "[temperature]", 5 / 9, 459.67),
    "degrees fahrenheit": ("°F", "[temperature]", 5 / 9, 459.67),
    "degree fahrenheit": ("°F", "[temperature]", 5 / 9, 459.67),
}


@lru_cache(maxsize=1)
def _unit_registry() -> Any:
    import pint

    return pint.UnitRegistry()


@lru_cache(maxsize=256)
def _pint_unit(expression: str) -> tuple[str, float]:
    """(dimension, factor to base units) of a pint unit expression."""
    base = _unit_registry().Quantity(1.0, expression).to_base_units()
    return str(base.dimensionality), float(base.magnitude)


def _unit(word: str) -> tuple[str, str, float, float] | None:
    """(label, dimension, factor to base units, offset) for a unit word, None when not a unit."""
    word = re.sub(r"\s+", " ", word.strip())
    low = word.casefold()
    if low in _SPECIAL_UNITS:
        return _SPECIAL_UNITS[low]
    if low in _CURRENCY_WORDS:
        code = _CURRENCY_WORDS[low]
        return (code, "currency " + code, 1.0, 0.0)
    expression = _UNIT_SYMBOLS.get(word)
    label = word
    if expression is None:
        singular = low[:-2] if low.endswith("es") and low[:-2] in _UNIT_NAMES else (
            low[:-1] if low.endswith("s") and low[:-1] in _UNIT_NAMES else low
        )
        expression = _UNIT_NAMES.get(singular)
        label = singular
    if expression is None:
        return None
    dimension, factor = _pint_unit(expression)
    return (label, dimension, factor, 0.0)


def _round(value: float) -> float | int:
    value = float(f"{value:.10g}")
    return int(value) if value.is_integer() and abs(value) < 1e15 else value


def _valid_day(year: int | None, month: int, day: int) -> bool:
    if not 1 <= month <= 12 or day < 1:
        return False
    if year is None or year < 1:
        return day <= (29 if month == 2 else 30 if month in (4, 6, 9, 11) else 31)
    return day <= calendar.monthrange(year, month)[1]


def _era_year(year: str, era: str | None) -> int:
    value = int(year)
    return -value if era and era.upper().startswith("B") else value


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _blank_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with every span blanked, in one pass (one ``_blank`` per span is quadratic)."""
    pieces, last = [], 0
    for start, end in sorted(spans):
        start = max(start, last)
        if end > start:
            pieces += [text[last:start], " " * (end - start)]
            last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _extract_dates(text: str, values: list[tuple]) -> str:
    # Each pass takes every valid match and blanks them all at once; passes repeat while one
    # finds more (blanking can free a date glued to another), so a long text costs passes x
    # length, not dates x length.
    # Five patterns need a month name; blanking only removes text, so one look suffices.
    has_month = _MONTH_HINT.search(text) is not None
    for kind, pattern in _DATE_PATTERNS:
        if not has_month and kind not in ("ymd", "num"):
            continue
        while True:
            found = [
                (match.span(), value)
                for match in pattern.finditer(text)
                if (value := _date_value(kind, match)) is not None
            ]
            if not found:
                break
            values.extend(value for _, value in found)
            text = _blank_spans(text, [span for span, _ in found])
    return text


def _date_value(kind: str, match: re.Match[str]) -> tuple | None:
    groups = match.groupdict()
    month = _MONTH_NUMBER[groups["mon"].rstrip(".").casefold()] if groups.get("mon") else 0
    if kind == "ymd":
        year, month, day = int(groups["y"]), int(groups["m"]), int(groups["d"])
    elif kind == "num":
        a, b, year = int(groups["a"]), int(groups["b"]), int(groups["y"])
        if a > 12 and _valid_day(year, b, a):
            return ("date", year, b, a)
        if b > 12 and _valid_day(year, a, b):
            return ("date", year, a, b)
        if a == b and _valid_day(year, a, a):
            return ("date", year, a, a)
        if _valid_day(year, a, b) and _valid_day(year, b, a):
            return ("date~", year, a, b)
        return None
    elif kind in ("dmy", "mdy"):
        year, day = _era_year(groups["y"], groups.get("era")), int(groups["d"])
    elif kind == "my":
        year, day = _era_year(groups["y"], groups.get("era")), 0
        return ("date", year, month, 0)
    else:  # dm, md: no year
        day = int(groups["d"])
        return ("md", month, day) if _valid_day(None, month, day) else None
    if not _valid_day(year, month, day):
        return None
    return ("date", year, month, day)


# capitalised words that start a clause rather than a name: "When I was"
_NOT_NAMES = frozenset({
    "when", "then", "if", "as", "so", "and", "but", "here", "there", "what", "where", "who",
    "how", "why", "did", "do", "can", "could", "would", "should", "may", "might", "must", "have",
    "am", "was", "that", "because", "while", "after", "before", "since", "until", "though",
    "although", "now", "today", "yes", "no", "well", "still", "also",
})
_ROMAN = re.compile(r"^(?:X{0,3})(?:IX|IV|V?I{0,3})$")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10}
_REGNAL = re.compile(r"(?<=[^\W\d_])(?P<gap>,?\s+)(?P<rn>[IVX]+)\b(?P<after>\.?\s*\S?)")


def _roman_value(numeral: str) -> int:
    total = 0
    for current, following in zip(numeral, numeral[1:] + " ", strict=True):
        value = _ROMAN_VALUES[current]
        total += -value if following != " " and _ROMAN_VALUES[following] > value else value
    return total


def _extract_regnal(text: str, values: list[tuple]) -> str:
    for match in list(_REGNAL.finditer(text)):
        numeral = match.group("rn")
        if not _ROMAN.match(numeral):
            continue
        word_start = match.start()
        while word_start > 0 and not text[word_start - 1].isspace():
            word_start -= 1
        previous = text[word_start:match.start()]
        if (not previous[:1].isupper() or "," in match.group("gap")
                or fold(previous) in _NOT_NAMES):
            continue
        after = match.group("after")
        if after.startswith(".") and after[-1:].isupper():
            continue  # an initial: "Ștefan I. Nenițescu"
        if len(numeral) == 1 and after[-1:].isupper():
            continue  # a title word, not a numeral: "Songs I Wrote with Amy"
        values.append(("num", _roman_value(numeral)))
        start = match.start("rn")
        text = _blank(text, start, start + len(numeral))
    return text


# a number followed by a noun counts things ("8,000 seats"): it never equals a physical quantity
_COUNTED = re.compile(r"\s+(?P<w>[^\W\d_][\w-]*)")
_NOT_COUNTED = frozenset({
    "in", "on", "at", "of", "to", "by", "for", "from", "with", "and", "or", "the", "a", "an",
    "as", "is", "was", "were", "are", "be", "than", "more", "less", "over", "under", "about",
    "around", "after", "before", "since", "until", "ad", "bc", "bce", "ce", "when", "while",
    "during", "into", "per", "each", "through", "vs", "versus",
})


def _extract_numbers(text: str, values: list[tuple]) -> str:
    for match in _DECADE.finditer(text):
        values.append(("decade", int(match.group("y"))))
        text = _blank(text, match.start(), match.end())
    for match in _ERA_YEAR.finditer(text):
        year = match.group("y1") or match.group("y2")
        values.append(("date", _era_year(year, match.group("era")), 0, 0))
        text = _blank(text, match.start(), match.end())
    spans: list[tuple[int, int]] = []
    for match in _NUMBER.finditer(text):
        literal = match.group("int").replace(",", "") + (match.group("frac") or "")
        if match.group("exp"):
            # Scientific notation: exact decimal; beyond float range it stays an exact string,
            # so "1e400" and "1e401" still differ (both would be inf as floats).
            exact = decimal.Decimal(literal + match.group("exp"))
            if not math.isfinite(float(exact)) or (float(exact) == 0 and exact != 0):
                values.append(("sci", ("-" if match.group("sign") else "") + str(exact.normalize())))
                spans.append((match.start(), match.end()))
                continue
            literal = repr(float(exact))
        number = float(literal)
        if match.group("sign"):
            number = -number
        if match.group("scale"):
            number *= _SCALES[match.group("scale")]
        end = match.end()
        currency = match.group("cur")
        unit = None
        if currency:
            code = _CURRENCY_PREFIX[currency.strip().casefold()]
            unit = (code, "currency " + code, 1.0, 0.0)
            tail = re.match(r"\s?(?P<s>m|bn|k)\b", text[end:])
            if tail and not match.group("scale"):
                number *= _SCALES[tail.group("s")]
                end += tail.end()
        elif not match.group("ord"):
            after = _UNIT_AFTER.match(text, end)
            if after:
                u1, u2 = after.group("u1"), after.group("u2")
                if u2 and (found := _unit(f"{u1} {u2}")):
                    unit, end = found, after.end()
                elif found := _unit(u1):
                    unit, end = found, after.end("u1")
        if unit is None:
            counted = _COUNTED.match(text, end)
            noun = counted is not None and counted.group("w").casefold() not in _NOT_COUNTED
            kind = "count" if noun else "num"
            values.append((kind, _round(number)))
        else:
            label, dimension, factor, offset = unit
            base = (number + offset) * factor
            values.append(("qty", dimension, _round(base), _round(number), label))
        spans.append((match.start(), end))
    return _blank_spans(text, spans)


_DIGIT_SCALE = re.compile(
    r"(?<![\w.])(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?\s*"
    r"(?P<scale>thousand|million|billion|trillion)\b", re.IGNORECASE
)


def _scaled(match: re.Match[str]) -> str:
    """'5 million' → '5000000' before text2num, which would read 'million' alone."""
    number = float(match.group("n").replace(",", "") + (match.group("frac") or ""))
    value = _round(number * _SCALES[match.group("scale").casefold()])
    return str(value) if isinstance(value, int) else repr(value)


_DIGIT = re.compile(r"\d")


@lru_cache(maxsize=16384)
def _scan(text: str) -> tuple[tuple[tuple, ...], str]:
    """Values found in ``text`` and the text with their spans blanked.

    Cached per part text: the parts of a batch repeat far more than whole triples do. Every date,
    decade, era and number pattern needs a digit, and a regnal numeral needs I, V or X, so a text
    without them skips those passes (same result, most parts of real triples are names).
    """
    values: list[tuple] = []
    if not text.isascii():
        # text2num takes only valid Unicode: a lone surrogate (JSON allows "\ud800") reads as "?".
        text = unicodedata.normalize("NFKC", text).encode("utf-8", "replace").decode("utf-8")
    if _DIGIT.search(text) is not None:
        text = _DIGIT_SCALE.sub(_scaled, text)
    if any(c.isalpha() for c in text):
        text = alpha2digit(text, "en", threshold=2)
    if _DIGIT.search(text) is not None:
        text = _extract_dates(text, values)
        text = _extract_numbers(text, values)
    if "I" in text or "V" in text or "X" in text:
        text = _extract_regnal(text, values)
    return tuple(values), text


def _compatible_values(x: tuple, y: tuple) -> bool:
    """Whether two normalised values can describe the same thing (symmetric)."""
    if x[0] == "count" or y[0] == "count":
        if "qty" in (x[0], y[0]):
            return False
        x = ("num", *x[1:]) if x[0] == "count" else x
        y = ("num", *y[1:]) if y[0] == "count" else y
    if x[0] > y[0]:
        x, y = y, x
    kinds = (x[0], y[0])
    if kinds == ("num", "num"):
        return math.isclose(x[1], y[1], rel_tol=_REL_TOL, abs_tol=1e-9)
    if kinds == ("qty", "qty"):
        return x[1] == y[1] and math.isclose(x[2], y[2], rel_tol=_REL_TOL, abs_tol=1e-9)
    if kinds == ("num", "qty"):
        return math.isclose(x[1], y[3], rel_tol=_REL_TOL, abs_tol=1e-9)
    if kinds == ("date", "date"):
        return x[1] == y[1] and _fields_agree(x[2], y[2]) and (
            x[2] != y[2] or _fields_agree(x[3], y[3])
        )
    if kinds == ("date~", "date~"):
        return x == y
    if kinds == ("date", "date~"):
        return x[1] == y[1] and (x[2], x[3]) in ((y[2], y[3]), (y[3], y[2])) or (
            x[1] == y[1] and x[3] == 0 and x[2] in (y[2], y[3])
        )
    if kinds == ("date", "md"):
        return x[2] == y[1] and x[3] in (0, y[2])
    if kinds == ("date~", "md"):
        return (y[1], y[2]) in ((x[2], x[3]), (x[3], x[2]))
    if kinds == ("md", "md"):
        return x == y
    if kinds in (("date", "num"), ("date~", "num")):
        return float(y[1]).is_integer() and int(y[1]) == x[1]
    if kinds in (("decade", "decade"), ("sci", "sci")):
        return x == y
    if kinds in (("date", "decade"), ("date~", "decade")):
        return y[1] <= x[1] < y[1] + 10
    if kinds == ("decade", "num"):
        return x[1] <= y[1] < x[1] + 10
    return False


def _fields_agree(p: int, q: int) -> bool:
    return p == 0 or q == 0 or p == q


def _show(value: tuple) -> str:
    kind = value[0]
    if kind in ("num", "count", "sci"):
        return str(value[1])
    if kind == "qty":
        return f"{value[3]} {value[4]}"
    if kind == "date":
        year, month, day = value[1:]
        return f"{year}" + (f"-{month:02d}" if month else "") + (f"-{day:02d}" if day else "")
    if kind == "date~":
        return f"{value[2]:02d}/{value[3]:02d}/{value[1]} (day/month order unknown)"
    if kind == "md":
        return f"--{value[1]:02d}-{value[2]:02d}"
    return f"{value[1]}s"


def _has_date(values: Iterable[tuple]) -> bool:
    return any(
        v[0] in ("date", "date~", "md", "decade")
        or (v[0] in ("num", "count") and isinstance(v[1], int) and 100 <= abs(v[1]) <= 2200)
        for v in values
    )


# --------------------------------------------------------------------------------------------
# Relation lookup
# --------------------------------------------------------------------------------------------


def _relation_tokens(words: Iterable[str]) -> list[str]:
    out = []
    for word in words:
        if word in _BE:
            out.append("be")
        elif word in _HAVE:
            out.append("have")
        elif word not in _ARTICLES:
            out.append(word)
    return out


def _build_index() -> tuple[dict[str, tuple[tuple[str, bool], ...]], dict[str, tuple[str, ...]]]:
    index: dict[str, list[tuple[str, bool]]] = {}
    texts: dict[str, list[str]] = {}
    for rel in RELATIONS:
        for inverse, verbs in ((False, rel.forward), (True, rel.inverse)):
            for verb in verbs:
                key = " ".join(_relation_tokens(fold(verb).split()))
                entry = (rel.id, inverse)
                if entry not in index.setdefault(key, []):
                    index[key].append(entry)
                texts.setdefault(rel.id, [])
                if key not in texts[rel.id]:
                    texts[rel.id].append(key)
    return (
        {key: tuple(entries) for key, entries in index.items()},
        {rid: tuple(keys) for rid, keys in texts.items()},
    )


_INDEX, _VERBALISATIONS = _build_index()
_INDEX_KEYS = tuple(sorted(_INDEX))


def _lookup_exact(tokens: list[str]) -> tuple[tuple[str, bool], ...] | None:
    tokens = list(tokens)
    while tokens:
        entries = _INDEX.get(" ".join(tokens))
        if entries:
            return entries
        if len(tokens) > 1 and tokens[0] in _LEADING_FILLERS:
            tokens = tokens[1:]
            continue
        if len(tokens) > 1 and tokens[-1] in _TRAILING_FILLERS:  # "whose mother is"
            tokens = tokens[:-1]
            continue
        return None
    return None


@lru_cache(maxsize=8192)
def _lookup_fuzzy(text: str) -> tuple[tuple[str, bool], ...] | None:
    if len(text) < 5:
        return None
    best = process.extractOne(text, _INDEX_KEYS, scorer=fuzz.ratio,
                              score_cutoff=RELATION_LOOKUP_CUTOFF)
    return _INDEX[best[0]] if best else None


def _choose(entries: tuple[tuple[str, bool], ...], dated_object: bool) -> tuple[str, bool]:
    for rid, inverse in entries:
        if RELATION_BY_ID[rid].dated == dated_object:
            return rid, inverse
    return entries[0]


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FactFeatures:
    """What the filters need to know about one triple, computed once by :func:`analyze`.

    ``subject_key`` / ``object_key`` are in CANONICAL direction: swapped when the relation was an
    inverse verbalisation (``inverse``) and sorted for a symmetric relation. They are folded
    (see :func:`fold`) with negation cues, numbers, dates, quantities and regnal numerals removed
    (those live in ``negated`` and ``quantities``; a generational numeral stays as a word at the
    end, and a qualifier after a comma is kept as ", " in the key). ``quantities`` holds tuples
    ``(part, kind, ...)`` with part "s" (subject) or "o" (object and relation) and kind one of
    num (value), count (value; a number before a noun), qty (dimension, value in base units,
    value as written, unit label), date (year, month, day; 0 = not given), date~ (year, the two
    day/month fields as written), md (month, day; no year), decade (first year). ``key`` is
    ``(relation_id or relation_key, subject_key, object_key, negated, quantities without the
    as-written magnitudes)`` with the keys' commas dropped; equal keys mean the same fact. ``relation_key`` is the relation id
    or, for an unknown relation, its folded text; ``negation_cues`` the cues counted;
    ``words`` the lower-case words of relation and object (for the pairwise un-/non- check).
    """

    subject: str
    relation: str
    object: str
    subject_key: str
    object_key: str
    relation_id: str | None
    inverse: bool
    negated: bool
    quantities: tuple[tuple, ...]
    key: tuple
    relation_key: str
    symmetric: bool
    negation_cues: tuple[str, ...]
    words: frozenset[str]


def _polarity(pairs: list[tuple[str, bool]], whole_object: bool) -> tuple[list[str], list[str]]:
    """Split folded (word, lower) pairs into kept words and negation cues."""
    kept: list[str] = []
    cues: list[str] = []
    single = whole_object and len(pairs) == 1
    for word, lower in pairs:
        usable = lower or not whole_object or single
        if single and word in _WHOLE_OBJECT_NEGATIONS:
            cues.append(word)
            if _WHOLE_OBJECT_NEGATIONS[word]:
                kept.append(_WHOLE_OBJECT_NEGATIONS[word])
        elif usable and word in _NEGATION_WORDS:
            cues.append(word)
        elif word in _SILENT and usable:
            continue
        elif usable and word in _CONTRACTIONS:
            cues.append(word)
            kept.append(_CONTRACTIONS[word])
        elif usable and word in _NEGATED_WORDS:
            cues.append(word)
            kept.append(_NEGATED_WORDS[word])
        else:
            kept.append(word)
    return kept, cues


@lru_cache(maxsize=16384)
def _subject_part(subject: str) -> tuple[tuple[tuple, ...], str]:
    """(values, entity key) of a subject; cached, since one subject recurs in many triples."""
    s_values, s_rest = _scan(subject)
    words = [word for word, _ in _words(_mark_qualifier(s_rest))]
    return s_values, _entity_key(words, bool(s_values), _generational(subject))


@lru_cache(maxsize=16384)
def _relation_part(relation: str, object: str) -> tuple:
    """What :func:`analyze` reads from a relation and its object (they interact: object words may
    complete the relation, a date in the object picks a dated relation), cached per pair.

    Returns (object values, object key, relation id, inverse, relation key, cues, words), with
    the object key and values in the direction written (:func:`analyze` swaps them).
    """
    r_values, r_rest = _scan(relation)
    o_values, o_rest = _scan(object)
    o_values = o_values + r_values

    r_kept, r_cues = _polarity(_words(r_rest), whole_object=False)
    o_kept, o_cues = _polarity(_words(_mark_qualifier(o_rest)), whole_object=True)
    cues = tuple(r_cues + o_cues)

    rel_tokens = _relation_tokens(r_kept) or ["be"]
    dated = _has_date(o_values)
    entries = _lookup_exact(rel_tokens)
    moved = 0
    bare = entries is None or entries[0][0] in ("be", "have")
    if bare or (o_kept and o_kept[0] in _PREPOSITIONS):
        # "X | was | born in Paris", "X | directed | by Y": object words complete the relation;
        # at least one word stays unless the object also holds a value ("born | in 1990")
        for take in range(min(4, len(o_kept) if o_values else len(o_kept) - 1), 0, -1):
            extended = _lookup_exact(rel_tokens + _relation_tokens(o_kept[:take]))
            if extended and extended[0][0] not in ("be", "have"):
                entries, moved = extended, take
                break
    relation_tokens = rel_tokens + o_kept[:moved]
    while len(relation_tokens) > 1 and relation_tokens[0] in _LEADING_FILLERS:
        relation_tokens = relation_tokens[1:]
    relation_key = " ".join(relation_tokens)
    o_kept = o_kept[moved:]
    if entries is None:
        entries = _lookup_fuzzy(relation_key)
    relation_id, inverse = _choose(entries, dated) if entries else (None, False)
    if relation_id is not None:
        relation_key = relation_id

    object_key = _entity_key(o_kept, bool(o_values), _generational(object))
    words = frozenset(word for word, lower in _words(r_rest + " " + o_rest) if lower)
    return o_values, object_key, relation_id, inverse, relation_key, cues, words


def clear_caches() -> None:
    """Empty the memoised string helpers (folding, scanning, entity and relation parts), as in a
    fresh process. The pint unit registry, built once like a model, stays loaded. For benchmarks
    that time a cold step; results never depend on the caches."""
    for helper in (fold, _words, _pint_unit, _scan, _lookup_fuzzy, _subject_part, _relation_part,
                   same_entity, _common_relation, _flip_candidates):
        helper.cache_clear()


def analyze(subject: str, relation: str, object: str) -> FactFeatures:
    """Read one triple into the features the filters compare (docs/method.md §2.4).

    Args:
        subject, relation, object: the triple's parts as asserted (any case, any script).

    Returns:
        A :class:`FactFeatures`; pure and deterministic, so callers may cache it per triple.

    Raises:
        TypeError: a part is not a string.
    """
    for name, part in (("subject", subject), ("relation", relation), ("object", object)):
        if not isinstance(part, str):
            raise TypeError(f"analyze: {name} must be str, got {type(part).__name__}")
    s_values, subject_key = _subject_part(subject)
    o_values, object_key, relation_id, inverse, relation_key, cues, words = _relation_part(
        relation, object)
    negated = len(cues) % 2 == 1
    s_part = tuple(sorted(s_values))
    o_part = tuple(sorted(o_values))
    if inverse:
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    symmetric = relation_id is not None and RELATION_BY_ID[relation_id].symmetric
    if symmetric and (_plain(object_key), o_part) < (_plain(subject_key), s_part):
        subject_key, object_key, s_part, o_part = object_key, subject_key, o_part, s_part
    quantities = tuple(sorted([("s", *v) for v in s_part] + [("o", *v) for v in o_part]))
    key_quantities = tuple(q[:4] if q[1] == "qty" else q for q in quantities)
    key = (relation_key, _plain(subject_key), _plain(object_key), negated, key_quantities)
    return FactFeatures(
        subject=subject, relation=relation, object=object,
        subject_key=subject_key, object_key=object_key,
        relation_id=relation_id, inverse=inverse, negated=negated,
        quantities=quantities, key=key, relation_key=relation_key, symmetric=symmetric,
        negation_cues=cues, words=words,
    )


# --------------------------------------------------------------------------------------------
# Entity matching and alignment
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def same_entity(a: str, b: str) -> bool:
    """Whether two folded entity keys name the same thing (symmetric).

    Equal keys (commas aside), an empty key, token containment (a one-letter token matches any
    token with that initial), or rapidfuzz ``ratio`` / ``token_sort_ratio`` >=
    ``ENTITY_CUTOFF`` agree; but never when one side has a generational suffix the other lacks,
    or a qualifier after a comma whose words the other lacks ("paris" vs "paris, texas"); with a
    qualifier, the parts before the commas must agree.
    """
    if a == b or not a or not b:
        return True
    plain_a, plain_b = _plain(a), _plain(b)
    if plain_a == plain_b:
        return True
    ta, tb = _content(plain_a), _content(plain_b)
    if _suffixes(ta) != _suffixes(tb):
        return False
    if ", " in a or ", " in b:
        # The other side must hold the qualifier's words, and the heads must agree.
        for key, other in ((a, tb), (b, ta)):
            if ", " not in key:
                continue
            qualifier = [t for t in _content(key.split(", ", 1)[1]) if t not in GENERATIONAL]
            if not _contained(qualifier, other):
                return False
        return same_entity(a.split(", ", 1)[0], b.split(", ", 1)[0])
    if _contained(ta, tb) or _contained(tb, ta):
        return True
    return max(fuzz.ratio(plain_a, plain_b), fuzz.token_sort_ratio(plain_a, plain_b)) >= ENTITY_CUTOFF


# A word standing for the first comma of a part that is followed by more words (a qualifier):
# it passes _words and _polarity as a plain word and becomes ", " in the key.
_QUALIFIER_MARK = "qualifiedbycomma"
_QUALIFYING_COMMA = re.compile(r"(?<=[^\W_])[^\w,]*,(?=[^,]*?[^\W\d_])")


def _mark_qualifier(text: str) -> str:
    """``text`` with its first comma after a word and before a letter replaced by the mark."""
    match = _QUALIFYING_COMMA.search(text) if "," in text else None
    if match is None:
        return text
    return f"{text[:match.end() - 1]} {_QUALIFIER_MARK} {text[match.end():]}"


def _roman(number: int) -> str:
    tens, units = divmod(number, 10)
    return "x" * tens + ("", "i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix")[units]


# Generational suffixes: Jr./Sr. and the numerals of more than one letter up to 39 (I, V and X
# alone are too often initials to count).
GENERATIONAL = frozenset({"jr", "sr", "jnr", "snr"} | {_roman(n) for n in range(2, 40)} - {"v", "x"})


def _generational(text: str) -> tuple[str, ...]:
    """The generational suffixes written after the first word of a part, in order."""
    if not text:
        return ()
    found = [word for word, _ in _words(text)[1:] if word in GENERATIONAL]
    return tuple(dict.fromkeys(found))


def _suffixes(tokens: list[str]) -> frozenset[str]:
    return frozenset(t for t in tokens[1:] if t in GENERATIONAL)


def _plain(key: str) -> str:
    """An entity key without its qualifier comma ("paris, texas" -> "paris texas")."""
    return key.replace(", ", " ", 1) if ", " in key else key


def _entity_key(tokens: list[str], had_values: bool, suffixes: tuple[str, ...] = ()) -> str:
    """Tokens without articles (a lone article stays unless numbers were taken from the part);
    the qualifier mark becomes ", " when a head precedes it and a word that is no suffix follows
    it; the generational ``suffixes`` of the part go last, sorted, wherever they were written
    and whether or not a numeral was taken out as a value ("Reginar III, Count of Hainaut" and
    "reginar iii, count of hainaut" both give "reginar, count of hainaut iii")."""
    kept = [t for t in tokens if t not in _ARTICLES]
    kept = kept if kept or had_values else tokens
    if suffixes:
        kept = kept[:1] + [t for t in kept[1:] if t not in suffixes]
    if _QUALIFIER_MARK in kept:
        at = kept.index(_QUALIFIER_MARK)
        head = [t for t in kept[:at] if t != _QUALIFIER_MARK]
        qualifier = [t for t in kept[at + 1 :] if t != _QUALIFIER_MARK]
        if head and qualifier:
            kept = [*head[:-1], head[-1] + ",", *qualifier]
        else:
            kept = head + qualifier
    return " ".join(kept + sorted(suffixes))


def _content(key: str) -> list[str]:
    tokens = key.split()
    return [t for t in tokens if t not in _ARTICLES] or tokens


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
    pool = {_stem(t) for t in long}
    for token in short:
        if _stem(token) in pool:
            continue
        if len(token) == 1 and any(other.startswith(token) for other in long):
            continue
        return False
    return True


def _lineage(rid: str) -> list[tuple[str, bool]]:
    chain, flipped, seen = [(rid, False)], False, {rid}
    rel = RELATION_BY_ID[rid]
    while rel.general is not None and rel.general not in seen:
        flipped ^= rel.general_inverted
        chain.append((rel.general, flipped))
        seen.add(rel.general)
        rel = RELATION_BY_ID[rel.general]
    return chain


@lru_cache(maxsize=32768)  # ids come from the lexicon: bounded
def _common_relation(ra: str, rb: str) -> tuple[str, bool, bool] | None:
    """(common id, flip a, flip b) when one id is the other or an ancestor of it."""
    if ra == rb:
        return ra, False, False
    for ancestor, flip in _lineage(ra):
        if ancestor == rb:
            return rb, flip, False
    for ancestor, flip in _lineage(rb):
        if ancestor == ra:
            return ra, False, flip
    return None


class _View(NamedTuple):  # a tuple: built three times per pair, cheaper than a dataclass
    s: str
    o: str
    s_values: tuple[tuple, ...]
    o_values: tuple[tuple, ...]


def _view(f: FactFeatures, flip: bool) -> _View:
    if f.quantities:
        s_values = tuple(q[1:] for q in f.quantities if q[0] == "s")
        o_values = tuple(q[1:] for q in f.quantities if q[0] == "o")
    else:
        s_values = o_values = ()
    if flip:
        return _View(f.object_key, f.subject_key, o_values, s_values)
    return _View(f.subject_key, f.object_key, s_values, o_values)


# The numeric, relation and entity filters of one pair run one after another and each aligns the
# pair: the last alignment is kept, matched by identity (the entry holds both features, so their
# ids cannot be reused, and features are frozen).
_LAST_ALIGN: list[tuple] = [()]


def _align(a: FactFeatures, b: FactFeatures) -> tuple[_View, _View, bool, str | None]:
    """Both facts in one direction: (view a, view b, symmetric relation, common relation id)."""
    last = _LAST_ALIGN[0]
    if last and last[0] is a and last[1] is b:
        return last[2]
    aligned = _align_pair(a, b)
    _LAST_ALIGN[0] = (a, b, aligned)
    return aligned


def _align_pair(a: FactFeatures, b: FactFeatures) -> tuple[_View, _View, bool, str | None]:
    common = None
    flip_a = flip_b = False
    if a.relation_id is not None and b.relation_id is not None:
        found = _common_relation(a.relation_id, b.relation_id)
        if found is not None:
            common, flip_a, flip_b = found
    va, vb = _view(a, flip_a), _view(b, flip_b)
    if common is not None:
        symmetric = RELATION_BY_ID[common].symmetric
    else:
        symmetric = a.symmetric and b.symmetric
    if symmetric:
        direct = _part_match(va.s, va.s_values, vb.s, vb.s_values, strict=True) + _part_match(
            va.o, va.o_values, vb.o, vb.o_values, strict=True)
        crossed = _part_match(va.s, va.s_values, vb.o, vb.o_values, strict=True) + _part_match(
            va.o, va.o_values, vb.s, vb.s_values, strict=True)
        if crossed > direct:
            vb = _View(vb.o, vb.s, vb.o_values, vb.s_values)
    return va, vb, symmetric, common


def _part_match(key_a: str, values_a: tuple, key_b: str, values_b: tuple, strict: bool) -> bool:
    """Whether two parts (entity key and values) name the same thing.

    ``strict`` (used to choose a pairing): an empty key matches only an empty key.
    """
    if strict and (not key_a or not key_b) and key_a != key_b:
        return False
    if _kind_clash(key_a, values_a, key_b, values_b):
        return False
    return same_entity(key_a, key_b) and not _lone_values(values_a, values_b)


def _kind_clash(key_a: str, values_a: tuple, key_b: str, values_b: tuple) -> bool:
    """One part is only a value (a date, a number) and the other only a name."""
    return bool((not key_a and values_a and key_b and not values_b)
                or (not key_b and values_b and key_a and not values_a))


def _lone_values(xs: tuple, ys: tuple) -> tuple[list[tuple], list[tuple]] | None:
    """Values of each side with no agreeing value on the other; None when they agree."""
    if not xs or not ys:
        return None
    if len(xs) == 1 and len(ys) == 1:  # the usual case: one call answers for both sides
        return None if _compatible_values(xs[0], ys[0]) else ([xs[0]], [ys[0]])
    lone_x = [x for x in xs if not any(_compatible_values(x, y) for y in ys)]
    lone_y = [y for y in ys if not any(_compatible_values(x, y) for x in xs)]
    return (lone_x, lone_y) if lone_x or lone_y else None


def _shown(key: str, values: tuple) -> str:
    return key or ", ".join(_show(v) for v in values)


def _pair(x: str, y: str) -> str:
    first, second = sorted((x, y))
    return f"{first!r} vs {second!r}"


# --------------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=16384)
def _flip_candidates(words: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(word, stem) of the un-/non- words outside the lexicon with a stem of >= 4 letters, sorted
    by word (a word starts with at most one of the prefixes)."""
    out = []
    for word in sorted(words):
        for prefix in _DYNAMIC_PREFIXES:
            stem = word[len(prefix):].lstrip()
            if word.startswith(prefix) and len(stem) >= 4 and word not in _NEGATED_WORDS:
                out.append((word, stem))
                break
    return tuple(out)


def _dynamic_flips(a: FactFeatures, b: FactFeatures) -> list[str]:
    candidates = _flip_candidates(a.words)
    if not candidates:
        return []
    return [word for word, stem in candidates if stem in b.words and word not in b.words]


def negation_veto(a: FactFeatures, b: FactFeatures) -> str | None:
    """Veto when the two facts have opposite polarity (docs/method.md §2.4, negation).

    Args:
        a, b: features from :func:`analyze`.

    Returns:
        None when both are affirmative or both negated (a double negation counts as
        affirmative); otherwise a reason naming the cues of the negated side, the same text
        whichever argument comes first. Never raises.
    """
    flips_a, flips_b = _dynamic_flips(a, b), _dynamic_flips(b, a)
    polarity_a = a.negated ^ (len(flips_a) % 2 == 1)
    polarity_b = b.negated ^ (len(flips_b) % 2 == 1)
    if polarity_a == polarity_b:
        return None
    negative, cues = (a, tuple(a.negation_cues) + tuple(flips_a)) if polarity_a else (
        b, tuple(b.negation_cues) + tuple(flips_b)
    )
    positive = b if negative is a else a
    shown = ", ".join(sorted(set(cues))) or "double negation"
    return (f"polarity differs: {_triple(negative)} is negated ({shown}), "
            f"{_triple(positive)} is not")


def _triple(f: FactFeatures) -> str:
    return f"'{f.subject} | {f.relation} | {f.object}'"


def numeric_veto(a: FactFeatures, b: FactFeatures) -> str | None:
    """Veto when numbers, dates or quantities disagree (docs/method.md §2.4, numeric).

    Args:
        a, b: features from :func:`analyze`.

    Returns:
        None when, for the subject and for the object (relation values count with the object),
        one side has no values or every value of each side agrees with some value of the other;
        otherwise a reason such as "object 1516-06-12 vs 1517-06-12". Never raises.
    """
    if not a.quantities or not b.quantities:
        return None  # one side has no values at all, in any alignment
    va, vb, symmetric, _ = _align(a, b)
    reasons = []
    for part, xs, ys in (("subject", va.s_values, vb.s_values),
                         ("object", va.o_values, vb.o_values)):
        lone = _lone_values(xs, ys)
        if lone is not None:
            left = ", ".join(_show(v) for v in (lone[0] or xs))
            right = ", ".join(_show(v) for v in (lone[1] or ys))
            first, second = sorted((left, right))
            reasons.append(f"{'argument' if symmetric else part} {first} vs {second}")
    return min(reasons) if symmetric and reasons else (reasons[0] if reasons else None)


def relation_veto(a: FactFeatures, b: FactFeatures) -> str | None:
    """Veto when the relations are not equivalent (docs/method.md §2.4, relation).

    Args:
        a, b: features from :func:`analyze`.

    Returns:
        None when the relation ids are equal or one generalises the other and, for a
        non-symmetric relation, subject and object are not swapped; for unknown relations, when
        the folded texts (or a verbalisation of the known id) reach rapidfuzz ratio
        ``RELATION_TEXT_CUTOFF``. Otherwise a reason. Never raises.
    """
    ra, rb = a.relation_id, b.relation_id
    if ra is not None and rb is not None:
        if _common_relation(ra, rb) is None:
            return f"different relations {_pair(ra, rb)}"
        va, vb, symmetric, common = _align(a, b)
        if symmetric:
            return None
        direct = (_part_match(va.s, va.s_values, vb.s, vb.s_values, strict=False)
                  and _part_match(va.o, va.o_values, vb.o, vb.o_values, strict=False))
        crossed = (_part_match(va.s, va.s_values, vb.o, vb.o_values, strict=False)
                   and _part_match(va.o, va.o_values, vb.s, vb.s_values, strict=False))
        if crossed and not direct:
            return f"subject and object swapped under non-symmetric {common!r}"
        return None
    if ra is None and rb is None:
        if _similar_text(a.relation_key, b.relation_key):
            return None
        return f"different relations {_pair(a.relation_key, b.relation_key)}"
    known, text = (ra, b.relation_key) if ra is not None else (rb, a.relation_key)
    if any(_similar_text(text, verb) for verb in _VERBALISATIONS[known]):
        return None
    return f"different relations {_pair(known, text)}"


def _similar_text(a: str, b: str) -> bool:
    """Unknown relation texts agree: ratio >= RELATION_TEXT_CUTOFF, or all content words of one
    are words of the other ("sold" ~ "records sold"; "in" alone is no content)."""
    if fuzz.ratio(a, b) >= RELATION_TEXT_CUTOFF:
        return True
    ta = set(a.split()) - _FUNCTION_WORDS
    tb = set(b.split()) - _FUNCTION_WORDS
    return bool(ta and tb) and (ta <= tb or tb <= ta)


def entity_veto(a: FactFeatures, b: FactFeatures) -> str | None:
    """Veto when the subjects or the objects name different entities (docs/method.md §2.4, entity).

    Args:
        a, b: features from :func:`analyze`.

    Returns:
        None when, in the aligned direction (either pairing for a symmetric relation), the
        subject keys and the object keys agree by :func:`same_entity` and neither pairs a part
        that is only a value (a date, a number) with one that is only a name; otherwise a reason
        naming
        the first part that differs ("argument" under a symmetric relation, where subject and
        object have no roles). Never raises.
    """
    va, vb, symmetric, _ = _align(a, b)
    reasons = [
        f"{'argument' if symmetric else part} {_pair(_shown(x, xv), _shown(y, yv))}"
        for part, x, xv, y, yv in (("subject", va.s, va.s_values, vb.s, vb.s_values),
                                   ("object", va.o, va.o_values, vb.o, vb.o_values))
        if not same_entity(x, y) or _kind_clash(x, xv, y, yv)
    ]
    return min(reasons) if symmetric and reasons else (reasons[0] if reasons else None)


FILTERS: dict[str, Callable[[FactFeatures, FactFeatures], str | None]] = {
    "negation": negation_veto,
    "numeric": numeric_veto,
    "relation": relation_veto,
    "entity": entity_veto,
}
DEFAULT_FILTERS: tuple[str, ...] = ("negation", "numeric", "relation", "entity")
_DEFAULT_SET = (DEFAULT_FILTERS, frozenset(DEFAULT_FILTERS))  # the tuple is immutable


def first_veto(
    a: FactFeatures, b: FactFeatures, enabled: Iterable[str] = DEFAULT_FILTERS
) -> str | None:
    """The first veto among the enabled filters, in the fixed order of :data:`FILTERS`.

    Args:
        a, b: features from :func:`analyze`.
        enabled: names from :data:`FILTERS`; order given here does not matter.

    Returns:
        ``"name: reason"`` for the first filter (negation, numeric, relation, entity) that
        vetoes, or None.

    Raises:
        ValueError: ``enabled`` names an unknown filter.
    """
    wanted = _DEFAULT_SET[1] if enabled is _DEFAULT_SET[0] else set(enabled)
    unknown = wanted - FILTERS.keys()
    if unknown:
        raise ValueError(f"enabled: unknown filter(s) {sorted(unknown)}; known: {list(FILTERS)}")
    for name, check in FILTERS.items():
        if name in wanted:
            reason = check(a, b)
            if reason is not None:
                return f"{name}: {reason}"
    return None
