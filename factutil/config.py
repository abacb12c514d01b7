"""The configuration: every knob of the method in :class:`FactUtilConfig` (docs/method.md §1-5),
and the helpers every surface (CLI, verl, OpenRLHF) builds one with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from factutil.errors import UNKNOWN_FIELD, error_messages, short, unknown_field_message
from factutil.search_r1 import ALL, LayoutName

FilterName = Literal["negation", "numeric", "relation", "entity"]

CLUSTERS = {"clusters": True}
"""The mark of a field that changes which facts share a cluster (:func:`clustering_fields`)."""

PRESETS: dict[str, dict[str, Any]] = {  # name -> the fields it sets unless given explicitly
    # The library's defaults: the paper's method with the group-centred prior of cluster success
    # and the process term normalised over the group like the outcome's (docs/decisions.md).
    "default": {},
    # The paper's method as published: Eq. 5-9's Beta(epsilon, epsilon) prior, Eq. 14's raw term.
    "paper": {"prior": "beta", "process_norm": "none"},
    # The defaults by name (prior='group', process_norm='group'), asserted and retrieved facts alike.
    "plain_grpo": {"prior": "group", "process_norm": "group"},
}


class FactUtilConfig(BaseModel):
    """Every parameter of the method, with its default and valid range (docs/method.md §1–§5).
    Unknown fields are rejected, so a typo never silently keeps a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    preset: Literal["default", "paper", "plain_grpo"] = Field(
        "default",
        description="A named group of settings (factutil.config.PRESETS), applied before the other "
        "fields, which override it: 'default' = every default; 'paper' = the published method "
        "(prior='beta', process_norm='none'); 'plain_grpo' = prior='group' + process_norm='group' "
        "whatever the facts.",
    )

    # §1 the agent
    max_turns: int = Field(8, ge=1, description="Most actions a rollout may take; later ones are ignored.")
    group_size: int | None = Field(
        None, ge=1, description="Expected rollouts per group (G, 6 in the paper); None accepts any."
    )
    facts: Literal["asserted", "retrieved"] = Field(
        "asserted",
        description="What a fact is: 'asserted' = the triples of assert actions (the paper's); "
        "'retrieved' = the passages each search's observation brought (docs/method.md §9; no "
        "FactAgent prompt needed; mode defaults to 'exact' there).",
    )
    layouts: tuple[LayoutName, ...] = Field(
        ALL,
        description="The named layouts of retrieved text whose block tags and passage headers "
        "split an observation into passages (factutil.search_r1.LAYOUTS): 'search_r1' "
        "(<information>, Doc i(Title: ...)), 'r1_searcher', 'autorefine', 'research', "
        "'tool_response'; every one by default. A whole response's turns end at any of them.",
    )
    # §2 clusters
    mode: Literal["exact", "semantic"] = Field(
        "semantic",
        description="Clustering: 'semantic' (embeddings + filters) or 'exact' (the paper's ablation); "
        "'exact' when facts='retrieved' and mode is not given.",
        json_schema_extra=CLUSTERS,
    )
    triple_template: str = Field(
        "{subject} | {relation} | {object}", description="Text of a triple before normalisation.",
        json_schema_extra=CLUSTERS,
    )
    embedding_model: str | None = Field(
        None, description="semantic mode: sentence-transformers name or path; None = bundled MiniLM.",
        json_schema_extra=CLUSTERS,
    )
    sim_threshold: float = Field(
        0.90, ge=-1.0, le=1.0, description="semantic mode: cosine at or above which two facts may merge.",
        json_schema_extra=CLUSTERS,
    )
    sim_decimals: int = Field(
        4, ge=1, le=7, description="semantic mode: cosines are rounded to this many decimals first.",
        json_schema_extra=CLUSTERS,
    )
    filters: tuple[FilterName, ...] = Field(
        ("negation", "numeric", "relation", "entity"),
        description="semantic mode: the vetoes applied to candidate pairs (empty = embeddings only).",
        json_schema_extra=CLUSTERS,
    )
    key_edges: bool = Field(
        True,
        description="semantic mode: also link facts the filter analysis reads as the same fact "
        "(e.g. an inverse relation with subject and object swapped), whatever their cosine.",
        json_schema_extra=CLUSTERS,
    )
    embedding_backend: Literal["minilm", "minilm-int8", "static"] = Field(
        "minilm",
        description="semantic mode: 'minilm' (sentence-transformers; embedding_model may replace it), "
        "'minilm-int8' (ONNX int8, CPU), 'static' (static vectors distilled from MiniLM).",
        json_schema_extra=CLUSTERS,
    )
    embedding_device: str | None = Field(
        None, description="semantic mode: torch device for the embedder; None = CUDA when present."
    )
    embedding_batch_size: int = Field(
        32, ge=1,
        description="semantic mode: rows per forward pass (filled, so no text's vector depends on "
        "its batch).",
    )
    knn_min_size: int = Field(
        4000, ge=2, description="semantic mode: above this many facts in a group use hnswlib k-NN.",
        json_schema_extra=CLUSTERS,
    )
    knn_k: int = Field(10, ge=1, description="semantic mode: neighbours per fact in the k-NN graph.",
                       json_schema_extra=CLUSTERS)
    hnsw_m: int = Field(16, ge=2, description="semantic mode: hnswlib M.", json_schema_extra=CLUSTERS)
    hnsw_ef: int = Field(64, ge=1, description="semantic mode: hnswlib ef_construction and ef.",
                         json_schema_extra=CLUSTERS)
    hnsw_seed: int = Field(0, ge=0, description="semantic mode: hnswlib random seed.",
                           json_schema_extra=CLUSTERS)
    cache_max_entries: int = Field(
        100_000, ge=0, description="semantic mode: most embeddings kept in the LRU cache."
    )
    cache_max_bytes: int = Field(
        256 * 2**20, ge=0, description="semantic mode: most bytes of embeddings kept in the cache."
    )
    # §3 utility
    success: Literal["em", "f1", "reward"] = Field(
        "em", description="Per-rollout success y: EM, F1, or the outcome reward clipped to [0, 1]."
    )
    epsilon: float = Field(
        0.5, gt=0.0, le=1e6,
        description="Strength of the prior of cluster success: Beta(epsilon, epsilon) under "
        "prior='beta', strength 2*epsilon around the group's rate under prior='group' (at most 1e6).",
    )
    prior: Literal["beta", "group"] = Field(
        "group",
        description="Prior of cluster success: 'group' = Beta around the group's success rate, "
        "strength 2*epsilon (a group whose rollouts all scored the same gives utility 0); "
        "'beta' = Beta(epsilon, epsilon), the paper's Eq. 5-9.",
    )
    utility: Literal["group", "loo"] = Field(
        "group",
        description="The utilities a rollout's shaping reads: 'group' = u_c from all G rollouts "
        "(the paper's); 'loo' = from the other G-1, so a rollout's own outcome (already in "
        "A_out) does not feed its process reward.",
    )
    uniform_groups: Literal["keep", "zero"] = Field(
        "keep",
        description="A group whose rollouts all have the same success: 'keep' its utilities "
        "(docs/method.md §3), or 'zero' them so only penalties remain (docs/decisions.md).",
    )
    # §4 process rewards
    gamma: float = Field(1.0, gt=0.0, le=1.0, description="Shaping discount: F = gamma*Phi(S') - Phi(S).")
    alpha: float = Field(0.2, ge=0.0, le=1.0, description="Share of an assert's shaping sent back to its search.")
    invalid_penalty: float = Field(-0.1, le=0.0, description="Process reward of an invalid action.")
    repeat_search_penalty: float = Field(
        -0.01, le=0.0, description="Penalty of a repeated search query (the paper's duplicate search penalty)."
    )
    empty_store_answer_penalty: float = Field(
        -0.1, le=0.0, description="Penalty of an answer from an empty store (its outcome becomes 0)."
    )
    # §5 advantages
    omega: float = Field(0.5, ge=0.0, description="Weight of the process advantage: A = A_out + omega*A_proc.")
    norm_by_std: bool = Field(True, description="Divide the outcome advantage by the group std (verl's norm_adv_by_std_in_grpo).")
    norm_eps: float = Field(1e-6, gt=0.0, description="eps in (x - mean) / (std + eps).")
    process_norm: Literal["none", "group"] = Field(
        "group",
        description="Process advantage: 'group' = the process reward r normalised over the group's "
        "actions, like the outcome's; 'none' = r itself (the paper's Eq. 14; the default under "
        "facts='retrieved').",
    )
    # runtime
    pause_gc: bool = Field(
        True,
        description="Pause Python's cyclic garbage collector during a step on the main thread "
        "(collections mid-step are wasted work).",
    )
    report_every: int = Field(
        0, ge=0,
        description="Trainers: write the HTML credit report of every N-th step's batch "
        "(factutil_reports/step_NNNNNN.html), in a background thread; 0: never.",
    )
    prepare_in_workers: bool | None = Field(
        None,
        description="Trainers: make the per-fact work (texts, embeddings, filter analyses) in the "
        "rollout workers, for the step's clusterer caches; None: on for semantic, asserted facts.",
    )
    score_early: bool = Field(
        True,
        description="Trainers (verl, OpenRLHF): score a batch in a background thread once its "
        "rewards are known, used if its inputs are unchanged at the advantage step; verl: never "
        "with KL in the reward.",
    )
    prepared_device: Literal["any", "same"] = Field(
        "any",
        description="semantic mode: per-fact work made on another kind of device than the step's "
        "embedder (vectors differ by ~1e-7): 'any' uses it (one warning, metric "
        "cluster_work_other_device); 'same' ignores it, for bit-identical results.",
    )
    # QA metrics
    fold_unicode: bool = Field(
        False, description="Also fold Unicode dashes and quotes in answer normalisation (off = SQuAD bytes)."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_fields_named(cls, data: Any, handler: Any) -> Any:
        # pydantic says "Extra inputs are not permitted"; name the field and the closest known one
        # (errors.unknown_field_message, the rule every error path uses), keep every other error.
        try:
            return handler(data)
        except ValidationError as error:
            items = error.errors(include_url=False)
            if not any(item["type"] == "extra_forbidden" and len(item["loc"]) == 1 for item in items):
                raise
            known = tuple(cls.model_fields)
            rebuilt = []
            for item in items:
                kind: Any = item["type"]
                if kind == "extra_forbidden" and len(item["loc"]) == 1:
                    kind = PydanticCustomError(UNKNOWN_FIELD, "{message}", {
                        "message": unknown_field_message(item["loc"][0], known)})
                entry = {"type": kind, "loc": item["loc"], "input": item.get("input")}
                if "ctx" in item and isinstance(kind, str):
                    entry["ctx"] = item["ctx"]
                rebuilt.append(entry)
            raise ValidationError.from_exception_data(error.title, rebuilt) from None

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("preset"), str) \
                and data["preset"] in PRESETS:
            data = {**PRESETS[data["preset"]], **data}
        if isinstance(data, Mapping) and data.get("facts") == "retrieved":
            # passages: clustered by identity, the raw process term (docs/decisions.md), unless asked
            data = {"mode": "exact", "process_norm": "none", **data}
        return data

    @field_validator("filters", "layouts", mode="before")
    @classmethod
    def _names_unique(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):  # "a,b" as given to --set
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(name, str) for name in value) \
                and len(set(value)) != len(value):  # other items: pydantic names them
            raise ValueError(f"{info.field_name} repeats a name: {list(value)!r}")
        if info.field_name == "layouts" and value in ([], ()):
            raise ValueError("layouts names no layout: name one of factutil.search_r1.LAYOUTS")
        return value

    @field_validator("triple_template")
    @classmethod
    def _template_has_parts(cls, value: str) -> str:
        missing = [part for part in ("{subject}", "{relation}", "{object}") if part not in value]
        if missing:
            raise ValueError(f"triple_template {value!r} lacks {', '.join(missing)}")
        try:
            value.format(subject="s", relation="r", object="o")
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"triple_template {value!r} is not a valid format string: {error}") from None
        return value


class ConfigError(ValueError):
    """A bad configuration; ``str()`` is one line per problem, naming where the setting came from
    (``config: omega``, ``FACTUTIL_OMEGA='-1': omega``), the field and the value."""


def load_yaml(text: str) -> Any:
    """YAML text as Python values (:func:`yaml.safe_load`'s types; a yaml.YAMLError if it cannot
    be read). An integer past Python's 4,300-digit limit is read as a float, so it fails its
    field's check by name instead of escaping as a bare ValueError."""
    import yaml  # imported on use: the OpenRLHF adapter reads settings before factutil is needed

    class Loader(yaml.SafeLoader):
        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except ValueError:  # more digits than int() reads: its magnitude is what matters
                return float(self.construct_scalar(node).replace("_", ""))

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    try:
        return yaml.load(text, Loader=Loader)  # safe: a SafeLoader subclass
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None


def setting_value(text: str) -> Any:
    """A setting given as text (``--set``, an environment variable) as a YAML scalar (``"0.3"``
    -> 0.3, ``"true"`` -> True); a blank text, or one YAML cannot read, stays as given."""
    if not text.strip():
        return text
    import yaml

    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def error_lines(error: ValidationError, where: Callable[[str], str]) -> str:
    """One ``where(field): message`` line per problem of ``error``
    (:func:`factutil.errors.error_messages`)."""
    return "\n".join(f"{where(field)}: {message}" for field, message in error_messages(error))


def as_config(config: FactUtilConfig | Mapping[str, Any] | None) -> FactUtilConfig:
    """``config`` as a :class:`FactUtilConfig`: itself, a mapping of its fields, or None (the
    defaults). TypeError naming anything else; :class:`ConfigError` for a bad mapping (one
    ``config: field: message (got VALUE)`` line per problem, raised from pydantic's error)."""
    if config is None or isinstance(config, FactUtilConfig):
        return config if config is not None else FactUtilConfig()
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a FactUtilConfig or a mapping of its fields, got "
                        f"{type(config).__name__} {short(config)}")
    return config_from_values(config)


def config_from_values(
    values: Mapping[str, Any],
    where: Callable[[str], str] = lambda field: f"config: {field}",
    error: type[ValueError] = ConfigError,
) -> FactUtilConfig:
    """Validate ``values`` (field -> value) into a :class:`FactUtilConfig`; raises ``error`` (an
    adapter's ValueError subclass) with one :func:`error_lines` line per problem, from the
    pydantic error (its ``__cause__``)."""
    try:
        return FactUtilConfig.model_validate(dict(values))
    except ValidationError as problem:
        raise error(error_lines(problem, where)) from problem


def clustering_fields(config: FactUtilConfig) -> dict[str, Any]:
    """What ``config``'s clusters depend on (docs/method.md §2): ``mode`` and, in semantic mode,
    every field marked :data:`CLUSTERS`, by name (sequences as tuples). Two configs cluster a
    batch alike when these are equal (device, batch size and cache bounds change vectors only by
    float rounding, which an embedder's name and a work item's device cover)."""
    if config.mode == "exact":
        return {"mode": "exact"}
    return {name: tuple(value) if isinstance(value, (list, tuple)) else value
            for name, field in FactUtilConfig.model_fields.items()
            if field.json_schema_extra == CLUSTERS for value in (getattr(config, name),)}
