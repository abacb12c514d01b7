"""The four vetoes and :func:`first_veto` (docs/method.md §2.4): pure, symmetric functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from factutil.filters.cache import NO_MEMO, FilterCache
from factutil.filters.features import FactFeatures
from factutil.filters.lexicon import RELATION_BY_ID
from factutil.filters.quantities import compatible_values, show_value
from factutil.filters.relations import VERBALISATIONS


def _lineage(rid: str) -> list[tuple[str, bool]]:
    chain, flipped = {rid: False}, False
    rel = RELATION_BY_ID[rid]
    while rel.general is not None and rel.general not in chain:
        flipped ^= rel.general_inverted
        chain[rel.general] = flipped
        rel = RELATION_BY_ID[rel.general]
    return list(chain.items())


# Each id's ancestors (itself first) with the inversion met on the way: built once from the lexicon.
_ANCESTORS: dict[str | None, dict[str, bool]] = {
    None: {}, **{rid: dict(_lineage(rid)) for rid in RELATION_BY_ID}}


def _common_relation(ra: str | None, rb: str | None) -> tuple[str | None, bool, bool] | None:
    """(common id, flip a, flip b) when one id is the other or an ancestor of it (None, None:
    the same unknown relation)."""
    if ra == rb:
        return ra, False, False
    flip = _ANCESTORS[ra].get(rb)
    if flip is not None:
        return rb, flip, False
    flip = _ANCESTORS[rb].get(ra)
    if flip is not None:
        return ra, False, flip
    return None


class _View(NamedTuple):  # a tuple: built three times per pair, cheaper than a dataclass
    s: str
    o: str
    s_values: tuple[tuple, ...]
    o_values: tuple[tuple, ...]


def _view(f: FactFeatures, flip: bool, cache: FilterCache) -> _View:
    s_values, o_values = cache.part_values(f.quantities) if f.quantities else ((), ())
    if flip:
        return _View(f.object_key, f.subject_key, o_values, s_values)
    return _View(f.subject_key, f.object_key, s_values, o_values)


def _align(
    a: FactFeatures, b: FactFeatures, cache: FilterCache
) -> tuple[_View, _View, bool, str | None]:
    """Both facts in one direction: (view a, view b, symmetric relation, common relation id).
    Three filters of a pair align it in turn, so the cache keeps the last alignment, matched by
    identity (the entry holds both features, so their ids cannot be reused)."""
    last = cache.last_align
    if last and last[0] is a and last[1] is b:
        return last[2]
    common, flip_a, flip_b = _common_relation(a.relation_id, b.relation_id) or (None, False, False)
    va, vb = _view(a, flip_a, cache), _view(b, flip_b, cache)
    symmetric = RELATION_BY_ID[common].symmetric if common is not None else (
        a.symmetric and b.symmetric)
    if symmetric:
        same = cache.same_entity
        direct = _part_match(va.s, va.s_values, vb.s, vb.s_values, True, same) + _part_match(
            va.o, va.o_values, vb.o, vb.o_values, True, same)
        crossed = _part_match(va.s, va.s_values, vb.o, vb.o_values, True, same) + _part_match(
            va.o, va.o_values, vb.s, vb.s_values, True, same)
        if crossed > direct:
            vb = _View(vb.o, vb.s, vb.o_values, vb.s_values)
    aligned = (va, vb, symmetric, common)
    if cache.memo:
        cache.last_align = (a, b, aligned)
    return aligned


def _part_match(
    key_a: str, values_a: tuple, key_b: str, values_b: tuple, strict: bool,
    same: Callable[[str, str], bool],
) -> bool:
    """Whether two parts (entity key and values) name the same thing; under ``strict`` (to
    choose a pairing) an empty key matches only an empty key."""
    if strict and (not key_a or not key_b) and key_a != key_b:
        return False
    if _kind_clash(key_a, values_a, key_b, values_b):
        return False
    return same(key_a, key_b) and not _lone_values(values_a, values_b)


def _kind_clash(key_a: str, values_a: tuple, key_b: str, values_b: tuple) -> bool:
    """One part is only a value (a date, a number) and the other only a name."""
    return bool((not key_a and values_a and key_b and not values_b)
                or (not key_b and values_b and key_a and not values_a))


def _lone_values(xs: tuple, ys: tuple) -> tuple[list[tuple], list[tuple]] | None:
    """Values of each side with no agreeing value on the other; None when they agree."""
    if not xs or not ys:
        return None
    if len(xs) == 1 and len(ys) == 1:  # the usual case: one call answers for both sides
        return None if compatible_values(xs[0], ys[0]) else ([xs[0]], [ys[0]])
    lone_x = [x for x in xs if not any(compatible_values(x, y) for y in ys)]
    lone_y = [y for y in ys if not any(compatible_values(x, y) for x in xs)]
    return (lone_x, lone_y) if lone_x or lone_y else None


def _shown(key: str, values: tuple) -> str:
    return key or ", ".join(show_value(v) for v in values)


def _pair(x: str, y: str) -> str:
    first, second = sorted((x, y))
    return f"{first!r} vs {second!r}"


def _dynamic_flips(a: FactFeatures, b: FactFeatures, cache: FilterCache) -> list[str]:
    return [word for word, stem in cache.flip_candidates(a.words)
            if stem in b.words and word not in b.words]


def negation_veto(a: FactFeatures, b: FactFeatures, cache: FilterCache | None = None) -> str | None:
    """Veto when the two facts have opposite polarity (docs/method.md §2.4, negation): None or a
    reason naming the negated side's cues, never an error. ``a``, ``b``: from :func:`analyze`;
    ``cache``: a :class:`~factutil.filters.FilterCache` to memoise through, or None (same result).
    """
    cache = cache if cache is not None else NO_MEMO
    flips_a, flips_b = _dynamic_flips(a, b, cache), _dynamic_flips(b, a, cache)
    polarity_a = a.negated ^ (len(flips_a) % 2 == 1)
    polarity_b = b.negated ^ (len(flips_b) % 2 == 1)
    if polarity_a == polarity_b:
        return None
    negative, positive, cues = (a, b, (*a.negation_cues, *flips_a)) if polarity_a else (
        b, a, (*b.negation_cues, *flips_b))
    shown = ", ".join(sorted(set(cues))) or "double negation"
    return (f"polarity differs: {_triple(negative)} is negated ({shown}), "
            f"{_triple(positive)} is not")


def _triple(f: FactFeatures) -> str:
    return f"'{f.subject} | {f.relation} | {f.object}'"


def numeric_veto(a: FactFeatures, b: FactFeatures, cache: FilterCache | None = None) -> str | None:
    """Veto when numbers, dates or quantities disagree (docs/method.md §2.4, numeric), as
    :func:`negation_veto`: a reason such as "object 1516-06-12 vs 1517-06-12". A value on one side
    only does not veto; relation values count with the object."""
    if not a.quantities or not b.quantities:
        return None  # one side has no values at all, in any alignment
    va, vb, symmetric, _ = _align(a, b, cache if cache is not None else NO_MEMO)
    reasons = []
    for part, xs, ys in (("subject", va.s_values, vb.s_values),
                         ("object", va.o_values, vb.o_values)):
        lone = _lone_values(xs, ys)
        if lone is not None:
            first, second = sorted((_shown("", lone[0] or xs), _shown("", lone[1] or ys)))
            reasons.append(f"{'argument' if symmetric else part} {first} vs {second}")
    return min(reasons) if symmetric and reasons else (reasons[0] if reasons else None)


def relation_veto(a: FactFeatures, b: FactFeatures, cache: FilterCache | None = None) -> str | None:
    """Veto when the relations are not equivalent (docs/method.md §2.4, relation), as
    :func:`negation_veto`. Known ids agree when equal or one generalises the other, without a
    swap under a non-symmetric relation; unknown ones by
    :func:`~factutil.filters.text.similar_text`."""
    cache = cache if cache is not None else NO_MEMO
    ra, rb = a.relation_id, b.relation_id
    if ra is not None and rb is not None:
        if _common_relation(ra, rb) is None:
            return f"different relations {_pair(ra, rb)}"
        va, vb, symmetric, common = _align(a, b, cache)
        if symmetric:
            return None
        same = cache.same_entity
        direct = (_part_match(va.s, va.s_values, vb.s, vb.s_values, False, same)
                  and _part_match(va.o, va.o_values, vb.o, vb.o_values, False, same))
        crossed = (_part_match(va.s, va.s_values, vb.o, vb.o_values, False, same)
                   and _part_match(va.o, va.o_values, vb.s, vb.s_values, False, same))
        if crossed and not direct:
            return f"subject and object swapped under non-symmetric {common!r}"
        return None
    if ra is None and rb is None:
        if cache.similar_text(a.relation_key, b.relation_key):
            return None
        return f"different relations {_pair(a.relation_key, b.relation_key)}"
    known, text = (ra, b.relation_key) if ra is not None else (rb, a.relation_key)
    if any(cache.similar_text(text, verb) for verb in VERBALISATIONS[known]):
        return None
    return f"different relations {_pair(known, text)}"


def entity_veto(a: FactFeatures, b: FactFeatures, cache: FilterCache | None = None) -> str | None:
    """Veto when the subjects or the objects name different entities (docs/method.md §2.4,
    entity), as :func:`negation_veto`: aligned, both keys must agree by :func:`same_entity` and no
    part that is only a value may pair with one that is only a name. The reason names the first
    part that differs ("argument" under a symmetric relation)."""
    cache = cache if cache is not None else NO_MEMO
    va, vb, symmetric, _ = _align(a, b, cache)
    same = cache.same_entity
    reasons = [
        f"{'argument' if symmetric else part} {_pair(_shown(x, xv), _shown(y, yv))}"
        for part, x, xv, y, yv in (("subject", va.s, va.s_values, vb.s, vb.s_values),
                                   ("object", va.o, va.o_values, vb.o, vb.o_values))
        if not same(x, y) or _kind_clash(x, xv, y, yv)
    ]
    return min(reasons) if symmetric and reasons else (reasons[0] if reasons else None)


def alike(a: FactFeatures, b: FactFeatures, cache: FilterCache | None = None) -> bool:
    """True only when no filter can veto the pair, a cheap check before the four: the facts agree
    on every field a filter compares, neither has a negating-prefix word, and each value agrees
    with itself, so every filter returns None. False does not mean a veto."""
    if not (a.subject_key == b.subject_key and a.object_key == b.object_key
            and a.relation_key == b.relation_key and a.relation_id == b.relation_id
            and a.negated == b.negated and a.quantities == b.quantities):
        return False
    cache = cache if cache is not None else NO_MEMO
    if cache.flip_candidates(a.words) or cache.flip_candidates(b.words):
        return False
    return all(compatible_values(q[1:], q[1:]) for q in a.quantities)  # no NaN, a known kind


FILTERS: dict[str, Callable[..., str | None]] = {  # (a, b, cache=None) -> reason or None
    "negation": negation_veto,
    "numeric": numeric_veto,
    "relation": relation_veto,
    "entity": entity_veto,
}
DEFAULT_FILTERS: tuple[str, ...] = ("negation", "numeric", "relation", "entity")


def first_veto(
    a: FactFeatures, b: FactFeatures, enabled: Iterable[str] = DEFAULT_FILTERS,
    cache: FilterCache | None = None,
) -> str | None:
    """``"name: reason"`` of the first veto among ``enabled`` (names of :data:`FILTERS`, in any
    order; ValueError for an unknown one) in the fixed order of :data:`FILTERS`, or None."""
    wanted = set(enabled)
    unknown = wanted - FILTERS.keys()
    if unknown:
        raise ValueError(f"enabled: unknown filter(s) {sorted(unknown)}; known: {list(FILTERS)}")
    for name, check in FILTERS.items():
        if name in wanted:
            reason = check(a, b, cache)
            if reason is not None:
                return f"{name}: {reason}"
    return None
