"""Numbers, dates, quantities, regnal numerals of a part; when two agree (docs/method.md §2.4)."""

from __future__ import annotations

import calendar
import decimal
import math
import re
import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any

from text_to_num import alpha2digit

from factutil.filters.entities import roman_numeral
from factutil.filters.text import fold

_REL_TOL = 1e-6  # relative tolerance when two numbers or quantities are compared

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
_CURRENCY_PREFIX = {"$": "usd", "us$": "usd", "usd": "usd", "€": "eur", "eur": "eur",
                    "£": "gbp", "gbp": "gbp", "¥": "jpy", "jpy": "jpy"}  # -> a currency word
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
    "gal": "gallon", "bbl": "barrel", "h": "hour", "hr": "hour", "hrs": "hour", "min": "minute",
    "mins": "minute", "sec": "second",
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
    **{name: name for name in (
        "meter", "kilometer", "centimeter", "millimeter", "mile", "foot", "inch", "yard",
        "kilogram", "gram", "milligram", "ton", "ounce", "pound", "stone", "hectare", "acre",
        "liter", "milliliter", "hectoliter", "gallon", "barrel", "hour", "minute", "second",
        "millisecond", "day", "week", "month", "year", "decade", "century", "knot", "watt",
        "kilowatt", "megawatt", "gigawatt", "horsepower", "joule", "calorie", "kilocalorie",
        "hertz", "kilohertz", "megahertz", "gigahertz", "byte", "kilobyte", "megabyte", "gigabyte",
        "terabyte", "volt", "kilovolt", "pascal", "atmosphere", "degree", "kelvin")},
    "metre": "meter", "kilometre": "kilometer", "centimetre": "centimeter",
    "millimetre": "millimeter", "feet": "foot", "inches": "inch", "nautical mile": "nautical_mile",
    "kilogramme": "kilogram", "gramme": "gram", "tonne": "metric_ton", "metric ton": "metric_ton",
    "litre": "liter", "millilitre": "milliliter", "hectolitre": "hectoliter",
    "centuries": "century", "square kilometre": "kilometer**2", "square kilometer": "kilometer**2",
    "square metre": "meter**2", "square meter": "meter**2", "square mile": "mile**2",
    "square foot": "foot**2", "square feet": "foot**2", "cubic metre": "meter**3",
    "cubic meter": "meter**3", "kilometres per hour": "kilometer/hour",
    "kilometers per hour": "kilometer/hour", "miles per hour": "mile/hour",
    "metres per second": "meter/second", "meters per second": "meter/second", "year old": "year",
    "years old": "year",
}
# label, dimension, factor to base units, offset added before the factor
_SPECIAL_UNITS: dict[str, tuple[str, str, float, float]] = {
    **dict.fromkeys(("%", "percent", "per cent", "pct"), ("%", "percent", 1.0, 0.0)),
    **dict.fromkeys(("°c", "° c", "degrees celsius", "degree celsius"),
                    ("°C", "[temperature]", 1.0, 273.15)),
    **dict.fromkeys(("°f", "° f", "degrees fahrenheit", "degree fahrenheit"),
                    ("°F", "[temperature]", 5 / 9, 459.67)),
    **{word: (code, "currency " + code, 1.0, 0.0) for word, code in _CURRENCY_WORDS.items()},
}


@lru_cache(maxsize=1)
def _unit_registry() -> Any:
    import pint

    return pint.UnitRegistry()


@cache  # keyed by the unit whitelist's expressions: a lazily built constant table
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
    """Whether the day exists; without a year (or before year 1) in a leap year, as year 4."""
    if not 1 <= month <= 12 or day < 1:
        return False
    return day <= calendar.monthrange(year if year is not None and year >= 1 else 4, month)[1]


def _era_year(year: str, era: str | None) -> int:
    value = int(year)
    return -value if era and era.upper().startswith("B") else value


def _blank_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with every span blanked, in one pass (span by span would be quadratic)."""
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
        readings = {(m, d) for m, d in ((b, a), (a, b)) if _valid_day(year, m, d)}
        if len(readings) == 1:  # one order only (or a == b): the date; both: order unknown
            return ("date", year, *readings.pop())
        return ("date~", year, a, b) if readings else None
    elif kind in ("dmy", "mdy"):
        year, day = _era_year(groups["y"], groups.get("era")), int(groups["d"])
    elif kind == "my":
        return ("date", _era_year(groups["y"], groups.get("era")), month, 0)
    else:  # dm, md: no year
        day = int(groups["d"])
        return ("md", month, day) if _valid_day(None, month, day) else None
    return ("date", year, month, day) if _valid_day(year, month, day) else None


# capitalised words that start a clause rather than a name: "When I was"
_NOT_NAMES = frozenset({
    "when", "then", "if", "as", "so", "and", "but", "here", "there", "what", "where", "who",
    "how", "why", "did", "do", "can", "could", "would", "should", "may", "might", "must", "have",
    "am", "was", "that", "because", "while", "after", "before", "since", "until", "though",
    "although", "now", "today", "yes", "no", "well", "still", "also",
})
_ROMAN_VALUES = {roman_numeral(n).upper(): n for n in range(1, 40)}  # the numerals I-XXXIX
_REGNAL = re.compile(r"(?<=[^\W\d_])(?P<gap>,?\s+)(?P<rn>[IVX]+)\b(?P<after>\.?\s*\S?)")


def _extract_regnal(text: str, values: list[tuple]) -> str:
    for match in list(_REGNAL.finditer(text)):
        numeral = match.group("rn")
        if numeral not in _ROMAN_VALUES:
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
        values.append(("num", _ROMAN_VALUES[numeral]))
        start = match.start("rn")
        text = _blank_spans(text, [(start, start + len(numeral))])
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
        text = _blank_spans(text, [match.span()])
    for match in _ERA_YEAR.finditer(text):
        year = match.group("y1") or match.group("y2")
        values.append(("date", _era_year(year, match.group("era")), 0, 0))
        text = _blank_spans(text, [match.span()])
    spans: list[tuple[int, int]] = []
    for match in _NUMBER.finditer(text):
        sign = "-" if match.group("sign") else ""
        literal = sign + match.group("int").replace(",", "") + (match.group("frac") or "")
        exp = match.group("exp") or ""
        number = float(literal + exp)
        if exp and (math.isinf(number) or (number == 0 and decimal.Decimal(literal) != 0)):
            # Beyond float range: an exact decimal string, so "1e400" and "1e401" still differ.
            values.append(("sci", str(decimal.Decimal(literal + exp).normalize())))
            spans.append((match.start(), match.end()))
            continue
        if match.group("scale"):
            number *= _SCALES[match.group("scale")]
        end = match.end()
        currency = match.group("cur")
        unit = None
        if currency:
            unit = _SPECIAL_UNITS[_CURRENCY_PREFIX[currency.strip().casefold()]]
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


def scan_values(text: str) -> tuple[tuple[tuple, ...], str]:
    """Values ``(kind, ...)`` found in ``text``, and the text with their spans blanked. Kinds:
    num, count (value; count before a noun), qty (dimension, base value, value as written, unit),
    date (year, month, day; 0 = not given), date~ (year, the day/month fields as written), md
    (month, day), decade (first year), sci (exact text)."""
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


def compatible_values(x: tuple, y: tuple) -> bool:
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
    if kinds == ("date", "date"):  # a month or day of 0 (not given) agrees with any
        if x[1] != y[1] or x[2] != y[2]:
            return x[1] == y[1] and 0 in (x[2], y[2])
        return 0 in (x[3], y[3]) or x[3] == y[3]
    if kinds == ("date", "date~"):
        return x[1] == y[1] and ((x[2], x[3]) in ((y[2], y[3]), (y[3], y[2]))
                                 or x[3] == 0 and x[2] in (y[2], y[3]))
    if kinds == ("date", "md"):
        return x[2] == y[1] and x[3] in (0, y[2])
    if kinds == ("date~", "md"):
        return (y[1], y[2]) in ((x[2], x[3]), (x[3], x[2]))
    if kinds in (("date", "num"), ("date~", "num")):
        return float(y[1]).is_integer() and int(y[1]) == x[1]
    if kinds in (("date~", "date~"), ("md", "md"), ("decade", "decade"), ("sci", "sci")):
        return x == y
    if kinds in (("date", "decade"), ("date~", "decade")):
        return y[1] <= x[1] < y[1] + 10
    if kinds == ("decade", "num"):
        return x[1] <= y[1] < x[1] + 10
    return False


def show_value(value: tuple) -> str:
    """A normalised value as a reader would write it, for veto reasons ("1990-05", "3 km")."""
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


def has_date(values: Iterable[tuple]) -> bool:
    """Whether any value is a date, a decade or a number that reads as a year (100-2200)."""
    return any(
        v[0] in ("date", "date~", "md", "decade")
        or (v[0] in ("num", "count") and isinstance(v[1], int) and 100 <= abs(v[1]) <= 2200)
        for v in values
    )


def part_values(quantities: tuple[tuple, ...]) -> tuple[tuple[tuple, ...], tuple[tuple, ...]]:
    """A fact's quantities split into the subject's and the object's, without the part letter."""
    return (tuple(q[1:] for q in quantities if q[0] == "s"),
            tuple(q[1:] for q in quantities if q[0] == "o"))
