"""The reader: a Search-R1-style agent of the credit ablation, which asserts nothing.

It acts in :mod:`benchmarks.credit_env`'s world (the same questions, BM25 paragraphs, offers and
wordings, at most 8 actions) with ``search``, ``answer`` or an invalid output, and answers from
what its searches retrieved, as Search-R1 and most search agents do; so factutil's
``facts="retrieved"`` (docs/method.md §9) is its natural mode: the facts are the passages of each
search's observation, and the shaping of a passage lands on the search that first retrieved it.

* **search** — the queries on offer are the question itself and each entity (subject or object,
  as the rollout's wording writes it) of the facts offered by the observations so far, latest
  observation first and each in the order offered, at most ``MAX_ENTITY_QUERIES`` of them
  (:func:`benchmarks.credit_env.choices`, as the asserting agent's come from its store).
* **answer** — reads the retrieved passages: observations from the latest backwards, each in the
  order offered (top paragraph first, a paragraph's own facts before its distractors), the object
  of the first fact whose relation is the one the question asks for last (the chain's last
  relation); else the object of the latest observation's first fact; else "unknown" (nothing
  retrieved). So it is right exactly when the chain's last fact's paragraph was retrieved and no
  same-relation distractor was offered after it (in a later observation, or ranked above it in
  its own).
* **invalid** — as the asserting agent's.

The policy sees the asserting agent's features (:data:`benchmarks.credit_env.FEATURES`, shared
names, shared start weights) and two of its own, :data:`benchmarks.credit_env.OFFER_FEATURES`:
of each entity query, the facts that offered it, by the best relation_match of their relation with
the question and the best share of their other entity's words found in the question or an earlier
query — what a reader of the passages sees when it picks the entity that the passage links to
what it asked about (the bridge entity) over one a passage merely mentions (an entity of a
distractor fact, whose features are otherwise the same). The search features as they are, with
"the entities just found" those of the latest observation's facts; for answer,
``answer_store_empty`` (nothing retrieved yet), ``answer_store_size`` (distinct paragraphs
retrieved, capped at 4, / 4), ``answer_turn``, and ``answer_last_relation_in_question`` (the best
relation_match with the question of a fact the latest observation offers). The assert features
stay 0.
"""

from __future__ import annotations

from benchmarks.credit_env import (
    EMPTY_ANSWER,
    FEATURES,
    OFFER_FEATURES,
    Episode,
    Wording,
    fold_key,
    relation_match,
)


class ReaderEpisode(Episode):
    """An :class:`benchmarks.credit_env.Episode` of the reader: its store stays empty; what it
    reads is ``observations`` (each search's offers) and ``retrieved`` (paragraph ids)."""

    features = FEATURES + OFFER_FEATURES

    def evidence(self) -> int:
        """The number of distinct paragraphs retrieved so far."""
        return len(set(self.retrieved))

    def latest_entities(self) -> set[str]:
        """Folded subjects and objects of the facts the latest observation offers."""
        return {fold_key(part) for w, _ in self.offered for part in (w.subject, w.object)}

    def answer_relation(self) -> float:
        """The best relation_match with the question of a fact the latest observation offers."""
        return max((relation_match(w.relation, self.question.words) for w, _ in self.offered),
                   default=0.0)

    def entity_sources(self) -> list[Wording]:
        """Every offered wording, latest observation first, each in the order offered."""
        return [w for offers in reversed(self.observations) for w, _ in offers]

    def entity_offers(self) -> dict[str, list[tuple[str, str]]]:
        """Folded entity -> (relation, other entity) of every offered wording that names it."""
        out: dict[str, list[tuple[str, str]]] = {}
        for w in self.entity_sources():
            for entity, other in ((w.subject, w.object), (w.object, w.subject)):
                out.setdefault(fold_key(entity), []).append((w.relation, other))
        return out

    def assertable(self) -> list[tuple[Wording, int]]:
        """None: the reader asserts nothing."""
        return []

    def read_answer(self) -> str:
        """The answer the retrieved passages support (see the module docstring)."""
        offered = self.entity_sources()
        if not offered:
            return EMPTY_ANSWER
        asked = self.question.facts[-1].relation
        return next((w.fact.object for w in offered if w.fact.relation == asked),
                    offered[0].fact.object)

    def gold_recall(self) -> float:
        """Share of the question's gold facts offered by a retrieved paragraph (any wording)."""
        seen = {w.fact.key for w in self.entity_sources()}
        return sum(f.key in seen for f in self.question.facts) / len(self.question.facts)
