"""The ``factutil`` command line (docs/method.md §8). Bad input or configuration: exit status 2
and one ``FILE:LINE: field: what is wrong`` line per problem, never a traceback."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Annotated, Any, NoReturn

import click
import typer
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from factutil import __version__
from factutil.api import ProcessAdvantages, compute_process_advantages
from factutil.cluster import Clusterer, SemanticClusterer, make_clusterer
from factutil.config import (
    ConfigError,
    FactUtilConfig,
    config_from_values,
    load_yaml,
    setting_value,
)
from factutil.embed.backends import EmbedderLoadError
from factutil.io import InputError, json_line, read_groups, write_jsonl
from factutil.passages import member_label
from factutil.report import (
    DEFAULT_MAX_GROUPS,
    GoldError,
    ReportInputs,
    load_gold,
    select_groups,
    summary_rows,
    write_report,
)
from factutil.report.plots import matplotlib_missing
from factutil.schema import input_json_schema


class _Help:
    """Help that reads as a command line: option values by name, no Python types, no braces."""

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""  # a flag takes no value
        return option

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


class _Command(_Help, TyperCommand):
    def invoke(self, ctx: click.Context) -> Any:
        if ctx.args:  # a word no option takes (EXTRA_WORDS)
            _fail(f"unexpected argument {ctx.args[0]!r}: --set takes key=value as one word "
                  f"(e.g. --set omega=0.3)")
        return super().invoke(ctx)


class _Group(_Help, TyperGroup):
    pass


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True)  # help: _main's
console = Console()
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    """Print ``message`` to stderr and exit with status 2, without a traceback."""
    errors.print(message, markup=False)
    raise typer.Exit(2) from None


def _refuse_overwrite(output: Path, inputs: dict[str, Path | None]) -> None:
    """Exit 2 when ``output`` is one of ``inputs`` (option -> path): the same path, or the same
    file through a link, so nothing an output replaces is ever read."""
    for option, path in inputs.items():
        if path is not None and output.exists() and path.exists() and os.path.samefile(output, path):
            _fail(f"{output}: is {option} {path}; write the output to another file")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"factutil {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, metavar="",
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """Dense per-step credit for search agents (FactAgent): score rollouts, show clusters."""


def load_config(path: Path | None = None, sets: list[str] | None = None) -> FactUtilConfig:
    """A :class:`FactUtilConfig` from a YAML/JSON file, then ``key=value`` overrides; a
    ConfigError for an unreadable file, a ``--set`` without ``=`` or a field failing validation."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = load_yaml(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            mark = getattr(error, "problem_mark", None)  # a YAML syntax error: where, and what
            if mark is not None:
                raise ConfigError(f"config: {path}:{mark.line + 1}:{mark.column + 1}: cannot "
                                  f"read: {getattr(error, 'problem', None) or 'not YAML'}") from None
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise ConfigError(f"config: {path}: cannot read: {reason}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config: {path}: expected a mapping of fields, got {type(loaded).__name__}")
        values.update(loaded or {})
    problems = []
    for item in sets or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            problems.append(f"config: --set {item!r}: expected key=value")
            continue
        values[key.strip()] = setting_value(text)
    if problems:
        raise ConfigError("\n".join(problems))
    return config_from_values(values)


def progress_bar() -> Progress:
    """A progress display on stderr, drawn only on a terminal and erased when done."""
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
        TimeElapsedColumn(), console=errors, transient=True, disable=not errors.is_terminal,
    )


EXTRA_WORDS = {"allow_extra_args": True}
"""Words no option takes reach the command, so ``--set omega 0.3`` is answered with the form
``--set`` wants rather than click's bare "unexpected extra argument"."""


def _score(
    path: Path, config_path: Path | None, sets: list[str] | None, progress: Progress
) -> ProcessAdvantages:
    """Load config and input, compute; exit 2 with one line per problem on bad input."""
    try:
        config = load_config(config_path, sets)
        task = progress.add_task(f"reading {path.name}", total=path.stat().st_size)
        groups = read_groups(path, lambda done: progress.advance(task, done))
    except (ConfigError, InputError) as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"{path}: cannot read: {error.strerror or error}")
    if not groups:
        errors.print(f"warning: {path} holds no rollout (empty or blank lines only)", markup=False)
    task = progress.add_task(f"scoring {len(groups)} groups", total=None)
    clusterer = _clusterer(config) if groups else None  # nothing to embed: no model to load
    try:
        result = compute_process_advantages(groups, config, clusterer=clusterer)
        progress.update(task, total=1, completed=1)
        return result
    except FloatingPointError as error:  # an advantage beyond float32: config or rewards too big
        _fail(f"{path}: {error}")


def _clusterer(config: FactUtilConfig) -> Clusterer:
    """The step's clusterer, its model loaded; exit 2 with one line naming the embedder's fields
    when it cannot load."""
    try:
        clusterer = make_clusterer(config)
        if isinstance(clusterer, SemanticClusterer):
            clusterer.warmup()
    except Exception as error:  # noqa: BLE001 - failing to load is the config's or the machine's
        fields = ", ".join(f"{name}={getattr(config, name)!r}" for name in
                           ("embedding_backend", "embedding_model", "embedding_device"))
        named = "" if isinstance(error, EmbedderLoadError) else f"{type(error).__name__}: "
        _fail(f"config: cannot load the embedder ({fields}): {named}"
              f"{' '.join(str(error).split()):.900}")
    return clusterer


ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", metavar="FILE", help="YAML or JSON file of config fields.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override one config field: key=value (repeatable)."),
]


def summary_table(result: ProcessAdvantages) -> Table:
    """The rich summary of a scoring run: the report's rows (:func:`summary_rows`), warnings, time."""
    m = result.metrics
    table = Table(title="factutil score", show_header=True, header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in [*summary_rows(result), ("warnings", f"{m['warnings']:.0f}"),
                        ("time (s)", f"{m['time_total_s']:.3f}")]:
        table.add_row(name, value)
    return table


@app.command(cls=_Command, context_settings=EXTRA_WORDS)
def score(
    input: Annotated[Path, typer.Argument(metavar="IN.jsonl", help="Rollouts, JSONL (docs/method.md §8).")],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="OUT.jsonl", help="Per-action JSONL to write.")],
    config: ConfigOption = None,
    set_: SetOption = None,
) -> None:
    """Write one line of credit per action (docs/method.md §8) and print a summary table.

    A missing output folder is created (the command says so); an output that is an input
    (the same path or file) is refused before anything is read."""
    _refuse_overwrite(output, {"the input": input, "--config": config})
    with progress_bar() as progress:
        result = _score(input, config, set_, progress)
        task = progress.add_task(f"writing {output.name}", total=len(result.advantages))
        try:
            if not output.parent.exists():
                output.parent.mkdir(parents=True)
                console.print(f"created folder {output.parent}", markup=False, highlight=False)
            write_jsonl(output, progress.track((r.to_dict() for r in result.actions), task_id=task))
        except OSError as error:
            _fail(f"{output}: cannot write: {error.strerror or error}")
    console.print(summary_table(result))
    console.print(f"wrote {len(result.actions)} action lines to {output}")


@app.command(cls=_Command, context_settings=EXTRA_WORDS)
def clusters(
    input: Annotated[Path, typer.Argument(metavar="IN.jsonl", help="Rollouts, JSONL (docs/method.md §8).")],
    format: Annotated[str, typer.Option("--format", "-f", metavar="table|json", help="table or json.")] = "table",
    config: ConfigOption = None,
    set_: SetOption = None,
) -> None:
    """Print each group's fact clusters with n, s, mean and utility (docs/method.md §8)."""
    if format not in ("table", "json"):
        _fail(f"--format: expected 'table' or 'json', got {format!r}")
    with progress_bar() as progress:
        result = _score(input, config, set_, progress)
    if format == "json":
        typer.echo(json_line([record.to_dict() for record in result.clusters]))
        return
    # One table per question, its uid in the title; a member is one line (cut to the width: the
    # json format has every member in full), so a narrow terminal or a pipe stays readable.
    retrieved = result.config.facts == "retrieved"
    for uid in dict.fromkeys(record.uid for record in result.clusters):
        table = Table(title=f"uid {uid}", title_justify="left", header_style="bold", expand=True)
        for column in ("cluster", "n", "s", "mean", "utility"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("members", no_wrap=True, overflow="ellipsis", ratio=1)
        for record in (r for r in result.clusters if r.uid == uid):
            members = "\n".join(member_label(member, retrieved) for member in record.members)
            table.add_row(str(record.cluster_id), str(record.n), f"{record.s:g}",
                          f"{record.mean:.3f}", f"{record.utility:+.3f}", members)
        console.print(table)


@app.command(cls=_Command, context_settings=EXTRA_WORDS)
def report(
    input: Annotated[Path, typer.Argument(metavar="IN.jsonl", help="Rollouts, JSONL (docs/method.md §8).")],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="OUT.html", help="HTML file to write.")],
    config: ConfigOption = None,
    set_: SetOption = None,
    uid: Annotated[
        list[str] | None, typer.Option("--uid", metavar="UID", help="Show only this question (repeatable).")
    ] = None,
    max_groups: Annotated[
        int,
        typer.Option(min=0, metavar="N", help="Questions shown in full, widest utility spread first; 0: all."),
    ] = DEFAULT_MAX_GROUPS,
    gold: Annotated[
        Path | None,
        typer.Option(metavar="GOLD.json", help="Gold evidence per uid (JSON: uid -> triples, or -> {gold: triples}): "
                          "marks gold clusters, adds gold vs distractor utilities and their AUC."),
    ] = None,
) -> None:
    """Write a self-contained HTML credit report of the rollouts' credit.

    The page holds a summary, plots, and every question's clusters and rollouts with their credit; it opens from disk (no script, no network)."""
    if output.suffix.lower() not in (".html", ".htm"):
        _fail(f"{output}: the report is an HTML page; name it .html (a browser prints it to PDF)")
    _refuse_overwrite(output, {"the input": input, "--config": config, "--gold": gold})
    try:
        gold_triples = load_gold(gold) if gold is not None else None
    except GoldError as error:
        _fail(f"--gold: {error}")
    if missing := matplotlib_missing():
        errors.print(missing, markup=False)
    with progress_bar() as progress:
        result = _score(input, config, set_, progress)
        if gold_triples and result.groups and not {g.uid for g in result.groups} & set(gold_triples):
            errors.print(f"warning: --gold {gold} names none of the input's {len(result.groups)} "
                         f"uids (e.g. {result.groups[0].uid!r}): no cluster is marked gold",
                         markup=False)
        inputs = ReportInputs(source=str(input), gold=gold_triples, max_groups=max_groups, uids=uid)
        created = not output.parent.exists()  # said after writing, as score says it
        try:
            shown = len(select_groups(result, max_groups, uid))
            task = progress.add_task(f"writing {output.name}", total=shown)
            write_report(result, output, inputs, progress=lambda n: progress.advance(task, n))
        except ValueError as error:  # an unknown --uid
            _fail(f"--uid: {error}")
        except OSError as error:
            _fail(f"{output}: cannot write: {error.strerror or error}")
    if created:
        console.print(f"created folder {output.parent}", markup=False, highlight=False)
    console.print(f"wrote {output} ({output.stat().st_size / 1e6:.2f} MB): {shown} of "
                  f"{len(result.groups)} questions in full", markup=False, highlight=False,
                  soft_wrap=True)


@app.command(cls=_Command)
def schema(
    what: Annotated[str, typer.Option(metavar="input|config", help="input (one JSONL line) or config.")] = "input",
) -> None:
    """Print the JSON Schema of the input line (docs/method.md §8) or of the configuration."""
    schemas = {"input": input_json_schema, "config": FactUtilConfig.model_json_schema}
    if what not in schemas:
        _fail(f"--what: expected 'input' or 'config', got {what!r}")
    typer.echo(json.dumps(schemas[what](), indent=2, ensure_ascii=False))


@app.command(cls=_Command)
def serve(
    corpus: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="JSON array or JSONL of {title, text} or {id, contents}; default: 2Wiki."),
    ] = None,
    host: Annotated[str, typer.Option(metavar="HOST", help="Address to bind (this machine only by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int, typer.Option(min=0, max=65535, metavar="PORT", help="TCP port; 0 picks a free one.")
    ] = 8000,
    topk: Annotated[
        int, typer.Option(min=1, metavar="K", help="Passages per query when a request gives no topk.")
    ] = 3,
    request_timeout: Annotated[
        float,
        typer.Option(
            min=0.001, metavar="SECONDS", help="Seconds a client may stay silent mid-body (then 408) or idle."
        ),
    ] = 10.0,
) -> None:
    """Serve BM25 retrieval with Search-R1's API (POST /retrieve) until interrupted."""
    try:
        # Imported when serving only: the server's dependencies (the `retrieval` extra) are no
        # part of scoring, and every other command starts without them.
        from factutil.tools.retrieval.server import serve as serve_retrieval

        serve_retrieval(corpus, host=host, port=port, topk=topk,
                        announce=lambda line: print(line, flush=True),
                        request_timeout_s=request_timeout)
    except (OSError, ValueError, ImportError) as error:
        _fail(f"serve: {getattr(error, 'strerror', None) or error}")


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: a file being written is removed


def main() -> None:
    """The ``factutil`` command: SIGTERM ends it as Ctrl-C does, leaving no temporary file."""
    signal.signal(signal.SIGTERM, _terminate)
    app()
