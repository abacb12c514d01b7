"""The command line of docs/method.md §8: exit status 2 with one line per problem, config overrides, schema."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from factutil.cli import ConfigError, app, load_config

runner = CliRunner()
ROW = {"uid": "q", "question": "?", "golden_answers": ["Paris"], "rollout_id": "q-0",
       "actions": [{"action": "search", "query": "capital"},
                   {"action": "assert", "triples": [["France", "capital", "Paris"]]},
                   {"action": "answer", "answer": "Paris"}]}


@pytest.fixture
def rollouts(tmp_path):
    path = tmp_path / "in.jsonl"
    rows = [ROW, dict(ROW, rollout_id="q-1", actions=ROW["actions"][:1] + [{"action": "answer", "answer": "Lyon"}])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_bad_input_exit_2_one_line_per_problem_no_traceback(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(dict(ROW, reward="x")) + "\n{oops\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "factutil", "score", str(path), "-o", str(tmp_path / "o.jsonl")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"{path}:1: reward: reward must be a number or null, got 'x'",
        f"{path}:2: (line): invalid JSON: Expecting property name enclosed in double quotes at column 2",
    ]
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_file_exit_2(tmp_path):
    result = runner.invoke(app, ["score", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2


def test_set_and_config_file(tmp_path, rollouts):
    config = tmp_path / "c.yaml"
    config.write_text("mode: exact\nomega: 0.3\nalpha: 0.0\n")
    loaded = load_config(config, ["omega=0", "success=f1", "norm_by_std=false"])
    assert (loaded.omega, loaded.alpha, loaded.success, loaded.norm_by_std) == (0.0, 0.0, "f1", False)
    (tmp_path / "c.json").write_text(json.dumps({"mode": "exact", "epsilon": 1.0}))
    assert load_config(tmp_path / "c.json").epsilon == 1.0
    with pytest.raises(ConfigError, match=r"config: omega: Input should be greater than or equal to 0 \(got -1\)"):
        load_config(None, ["omega=-1"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["omega"])
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"), "--set", "alpha=2"])
    assert result.exit_code == 2
    assert "config: alpha: Input should be less than or equal to 1 (got 2)" in result.output


def test_score_writes_lines_and_omega_zero(tmp_path, rollouts):
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(out), "--set", "mode=exact", "--set", "omega=0"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5
    assert all(row["advantage"] == pytest.approx(row["outcome_advantage"], abs=1e-7) for row in rows)
    assert rows[0]["outcome_advantage"] == pytest.approx(1 / (2 ** 0.5 + 1e-6))


def test_clusters_table_and_json(rollouts):
    table = runner.invoke(app, ["clusters", str(rollouts), "--set", "mode=exact"])
    assert table.exit_code == 0 and "France | capital | Paris" in table.output
    as_json = runner.invoke(app, ["clusters", str(rollouts), "--format", "json", "--set", "mode=exact"])
    data = json.loads(as_json.output)
    # y = [1, 0]: the one cluster was held by the correct rollout only: m = 1.5 / 2, u = 0.75 - 0.5.
    assert data == [{"uid": "q", "cluster_id": 0, "members": [["France", "capital", "Paris"]],
                     "n": 1, "s": 1.0, "mean": 0.75, "utility": 0.25}]
    assert runner.invoke(app, ["clusters", str(rollouts), "--format", "xml"]).exit_code == 2


def test_clusters_table_fits_80_columns_with_the_full_uid(rollouts):
    """Piped at 80 columns: the uid is whole (it titles its question's table) and each member
    stays on one line."""
    table = runner.invoke(app, ["clusters", str(rollouts), "--set", "mode=exact"],
                          env={"COLUMNS": "80"})
    lines = table.output.splitlines()
    assert "uid q" in [line.strip() for line in lines]
    assert max(len(line) for line in lines) <= 80
    assert sum("France | capital | Paris" in line for line in lines) == 1


def test_help_shows_values_by_name_not_python_types():
    for command in ("score", "clusters", "report", "schema", "serve"):
        text = runner.invoke(app, [command, "--help"], env={"COLUMNS": "100"}).output
        for python_type in ("<list[str]>", "<bool>", "<int", "<float", "<str>", "<text>", "{IN.jsonl}"):
            assert python_type not in text, (command, python_type)
    score = runner.invoke(app, ["score", "--help"], env={"COLUMNS": "100"}).output
    assert "score [OPTIONS] IN.jsonl" in " ".join(score.split())
    assert "KEY=VALUE" in score and "OUT.jsonl" in score


def test_schema_takes_a_search_listing_its_passages_as_strings_or_objects():
    """The input line's schema accepts what the models accept: a search's passages listed as
    strings (text, or Search-R1's contents) or as objects (docs/method.md §9), and no other item."""
    from factutil.load import load_groups

    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(runner.invoke(app, ["schema"]).output)
    for passages, valid in ((['"Lyon"\nLyon is a city.', "Paris is big."], True),
                            ([{"contents": '"Lyon"\nLyon is a city.'}, {"text": "x", "id": 3}], True),
                            ([3], False), ([{"title": "no text", "txt": "x"}], False)):
        row = {"uid": "q", "question": "Q?", "golden_answers": ["Lyon"], "rollout_id": "a",
               "actions": [{"action": "search", "query": "q", "passages": passages},
                           {"action": "answer", "answer": "Lyon"}]}
        assert jsonschema.Draft202012Validator(schema).is_valid(row) is valid, passages
        if valid:  # the models take it too
            load_groups([row])


def test_schema_describes_the_input_line():
    result = runner.invoke(app, ["schema"])
    schema = json.loads(result.output)
    assert set(schema["required"]) == {"uid", "question", "golden_answers", "rollout_id"}
    # the actions, or the whole response they are read from (docs/method.md §9)
    assert schema["anyOf"] == [{"required": ["actions"]}, {"required": ["response"]}]
    assert schema["properties"]["response"]["type"] == "string"
    assert "RawAction" in schema["$defs"] and "SearchAction" in schema["$defs"]
    config = json.loads(runner.invoke(app, ["schema", "--what", "config"]).output)
    assert config["properties"]["omega"]["default"] == 0.5
    # The paper's duplicate-search penalty, but the group-centred prior and the process term
    # normalised over the group by default; the paper's prior and raw term one preset away.
    assert config["properties"]["process_norm"]["default"] == "group"
    assert config["properties"]["repeat_search_penalty"]["default"] == -0.01
    assert config["properties"]["prior"]["default"] == "group"
    assert set(config["properties"]["prior"]["enum"]) == {"beta", "group"}
    assert config["properties"]["preset"]["default"] == "default"
    assert set(config["properties"]["preset"]["enum"]) == {"default", "paper", "plain_grpo"}
    assert config["properties"]["utility"]["default"] == "group"
    assert set(config["properties"]["utility"]["enum"]) == {"group", "loo"}


def test_console_script_installed():
    exe = shutil.which("factutil") or str(__import__("pathlib").Path(sys.executable).parent / "factutil")
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "score" in done.stdout


def test_version_prints_the_package_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"factutil {version('factutil')}\n"


def test_score_output_has_the_usual_file_mode_and_a_new_folder_is_announced(tmp_path, rollouts):
    """-o into a missing folder -> the folder is created and the command says so; the file's mode
    is 0666 less the umask (0644 under umask 022), not a temporary file's 0600."""
    import os

    out = tmp_path / "new" / "deeper" / "o.jsonl"
    old = os.umask(0o022)
    try:
        result = runner.invoke(app, ["score", str(rollouts), "-o", str(out), "--set", "mode=exact"])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert f"created folder {out.parent}" in result.output.replace("\n", "")
    assert out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["o.jsonl"]  # no temporary file left
    again = runner.invoke(app, ["score", str(rollouts), "-o", str(out), "--set", "mode=exact"])
    assert again.exit_code == 0 and "created folder" not in again.output
    blocked = runner.invoke(app, ["score", str(rollouts), "-o", str(out / "x.jsonl")])
    assert blocked.exit_code == 2 and "cannot write" in blocked.output


def test_a_misspelled_config_key_gets_a_suggestion(rollouts, tmp_path):
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"),
                                 "--set", "omgea=0.3", "--set", "zzz=1"])
    assert result.exit_code == 2
    assert "config: omgea: unknown field 'omgea' (did you mean 'omega'?)\n" in result.output
    assert "config: zzz: unknown field 'zzz'\n" in result.output


def test_score_rows_carry_the_invalid_reason(tmp_path):
    path = tmp_path / "in.jsonl"
    row = dict(ROW, actions=[{"action": "assert", "triples": [["France", "Paris"]]}, ROW["actions"][2]])
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert runner.invoke(app, ["score", str(path), "-o", str(out), "--set", "mode=exact"]).exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["action"], r["invalid_reason"]) for r in rows] == [
        ("invalid", "triple 0 has 2 parts, expected 3"), ("answer", None)]


def test_a_json_document_given_as_jsonl_is_one_line_saying_so(tmp_path):
    """A JSON document spread over lines (an object keyed by uid, or an array) is not JSON Lines:
    one line naming the file and what is expected, not one error per line."""
    for value, kind in (({"q": [["a", "b", "c"]], "r": []}, "object"), ([ROW, ROW], "array")):
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps(value, indent=2), encoding="utf-8")
        done = runner.invoke(app, ["score", str(path), "-o", str(tmp_path / "o.jsonl")])
        assert done.exit_code == 2
        assert done.output.strip().splitlines() == [
            (f"{path}: (file): a JSON document (one {kind}), not JSON Lines: expected one rollout "
             f"object per line (docs/method.md §8)")]


def test_empty_input_and_gold_naming_no_uid_are_warned(tmp_path, rollouts):
    """An input with no rollout scores (exit 0) with a warning saying so; a --gold file that
    names none of the input's uids is accepted with a warning naming an input uid."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    done = runner.invoke(app, ["score", str(empty), "-o", str(tmp_path / "o.jsonl")])
    assert done.exit_code == 0
    assert f"warning: {empty} holds no rollout (empty or blank lines only)" in done.output
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"other": [["a", "b", "c"]]}), encoding="utf-8")
    done = runner.invoke(app, ["report", str(rollouts), "-o", str(tmp_path / "r.html"),
                               "--gold", str(gold), "--set", "mode=exact"])
    assert done.exit_code == 0
    assert (f"warning: --gold {gold} names none of the input's 1 uids (e.g. 'q'): no cluster is "
            f"marked gold") in " ".join(done.output.split())


def test_a_missing_config_file_and_a_spaced_set_say_what_to_do(tmp_path, rollouts):
    """``--config nosuch.yaml`` -> "cannot read: No such file or directory" (no errno);
    ``--set omega 0.3`` -> the form --set wants; both exit 2."""
    done = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"),
                               "--config", str(tmp_path / "nosuch.yaml")])
    assert done.exit_code == 2
    assert done.output.strip() == (f"config: {tmp_path / 'nosuch.yaml'}: cannot read: No such "
                                   f"file or directory")
    for command in (["score", str(rollouts), "-o", str(tmp_path / "o.jsonl")],
                    ["clusters", str(rollouts)]):
        done = runner.invoke(app, [*command, "--set", "omega", "0.3"])
        assert done.exit_code == 2
        assert done.output.strip() == ("unexpected argument '0.3': --set takes key=value as one "
                                       "word (e.g. --set omega=0.3)")


def test_an_embedder_that_cannot_load_is_one_line_naming_its_fields(tmp_path, rollouts, monkeypatch):
    """An unknown torch device, or the static backend with a cache folder it cannot make -> exit
    2 and one line naming the embedder's config fields and the loader's own reason."""
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"),
                                 "--set", "embedding_device=foo"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("config: cannot load the embedder (embedding_backend='minilm', "
                           "embedding_model=None, embedding_device='foo'): RuntimeError: ")
    assert "device type at start of device string: foo [packages involved: " in line
    assert re.search(r"torch \d+\.\d+\S*\]$", line)
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("FACTUTIL_CACHE", str(tmp_path / "a-file"))
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"),
                                 "--set", "embedding_backend=static"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("config: cannot load the embedder (embedding_backend='static', "
                           "embedding_model=None, embedding_device=None): FileExistsError: ")
    assert str(tmp_path / "a-file") in line
    assert not (tmp_path / "o.jsonl").exists()


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path, rollouts):
    """``omega: [0.3`` with no closing bracket: PyYAML finds the stream's end on line 2,
    column 1, where it wanted ',' or ']'."""
    config = tmp_path / "c.yaml"
    config.write_text("omega: [0.3\n", encoding="utf-8")
    result = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"),
                                 "-c", str(config)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"config: {config}:2:1: cannot read: expected ',' or ']', but got '<stream end>'"]


@pytest.mark.parametrize("port", ["-5", "70000"])
def test_serve_refuses_a_port_outside_0_to_65535(port):
    result = runner.invoke(app, ["serve", "--port", port])
    assert result.exit_code == 2 and "Invalid value for '--port'" in result.output


def test_piped_stderr_gets_no_progress_bar_from_the_model_loader(rollouts):
    """Semantic mode loads MiniLM through transformers, which draws 'Loading weights' bars; with
    stderr a pipe (not a terminal) the command writes nothing there."""
    done = subprocess.run([sys.executable, "-m", "factutil", "clusters", str(rollouts),
                           "--format", "json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout)[0]["uid"] == "q"


def test_an_output_that_is_an_input_is_refused_before_anything_is_written(tmp_path, rollouts):
    """-o onto the input (same path, a symlink to it, a hard link), onto --config or onto
    --gold -> exit 2 naming both, and every file byte for byte as it was."""
    config = tmp_path / "c.yaml"
    config.write_text("mode: exact\n")
    gold = tmp_path / "gold.html"  # a gold file named like a report: the name alone is no guard
    gold.write_text(json.dumps({"q": [["France", "capital", "Paris"]]}))
    (tmp_path / "link.jsonl").symlink_to(rollouts)
    (tmp_path / "hard.jsonl").hardlink_to(rollouts)
    before = {path: path.read_bytes() for path in (rollouts, config, gold)}
    cases = [
        (["score", str(rollouts), "-o", str(rollouts)], rollouts, "the input"),
        (["score", str(rollouts), "-o", str(tmp_path / "link.jsonl")], rollouts, "the input"),
        (["score", str(tmp_path / "link.jsonl"), "-o", str(tmp_path / "hard.jsonl")],
         tmp_path / "link.jsonl", "the input"),
        (["score", str(rollouts), "-o", str(config), "-c", str(config)], config, "--config"),
        (["report", str(rollouts), "-o", str(gold), "--gold", str(gold)], gold, "--gold"),
    ]
    for args, named, option in cases:
        done = runner.invoke(app, [*args, "--set", "mode=exact"])
        assert done.exit_code == 2, done.output
        assert done.output.strip() == f"{args[3]}: is {option} {named}; write the output to another file"
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "c.yaml", "gold.html", "hard.jsonl", "in.jsonl", "link.jsonl"]


def test_a_report_named_other_than_html_is_refused(tmp_path, rollouts):
    """report -o r.pdf would write HTML into a .pdf: exit 2 saying to name it .html."""
    done = runner.invoke(app, ["report", str(rollouts), "-o", str(tmp_path / "r.pdf")])
    assert done.exit_code == 2
    assert "the report is an HTML page; name it .html" in done.output
    assert list(tmp_path.iterdir()) == [rollouts]


def test_sigterm_while_writing_leaves_neither_output_nor_temporary_file(tmp_path, rollouts):
    """The CLI as installed (factutil.cli.main) gets SIGTERM halfway through writing its output:
    it exits 143 and the folder holds the input alone."""
    out = tmp_path / "out" / "o.jsonl"
    out.parent.mkdir()
    script = (
        "import os, signal, sys\n"
        "import factutil.cli as cli, factutil.io as io\n"
        "def killed(rows):\n"
        "    for n, row in enumerate(rows):\n"
        "        if n == 1:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        yield row\n"
        "cli.write_jsonl = lambda path, rows: io.write_jsonl(path, killed(rows))\n"
        f"sys.argv = ['factutil', 'score', {str(rollouts)!r}, '-o', {str(out)!r}, '--set', 'mode=exact']\n"
        "cli.main()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 143, done.stderr
    assert list(out.parent.iterdir()) == []


def test_compressed_input_is_read_and_other_forms_are_refused_by_name(tmp_path, rollouts):
    """in.jsonl.gz / .bz2 / .xz score as the plain file does; a zstd or zip file, a file of
    random bytes -> exit 2 with one line for the form, or ten line errors and a count."""
    import bz2
    import gzip
    import lzma

    plain = runner.invoke(app, ["clusters", str(rollouts), "-f", "json", "--set", "mode=exact"])
    assert plain.exit_code == 0
    for suffix, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        packed = tmp_path / f"in.jsonl.{suffix}"
        packed.write_bytes(compress(rollouts.read_bytes()))
        done = runner.invoke(app, ["clusters", str(packed), "-f", "json", "--set", "mode=exact"])
        assert (done.exit_code, done.output) == (0, plain.output)
    for magic, form in ((b"\x28\xb5\x2f\xfd", "zstd-compressed"), (b"PK\x03\x04", "a zip archive")):
        other = tmp_path / "other.jsonl"
        other.write_bytes(magic + bytes(range(256)) * 40)
        done = runner.invoke(app, ["score", str(other), "-o", str(tmp_path / "o.jsonl")])
        assert done.exit_code == 2
        assert done.output.strip() == (f"{other}: (file): {form}, not JSON Lines: expected one "
                                       f"rollout object per line (docs/method.md §8), plain or "
                                       f"gzip/bzip2/xz-compressed")
    noise = tmp_path / "noise.jsonl"
    noise.write_bytes(b"\xff\n" * 5000)
    done = runner.invoke(app, ["score", str(noise), "-o", str(tmp_path / "o.jsonl")])
    lines = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 11
    assert lines[0] == f"{noise}:1: (line): not valid UTF-8: byte 0xff at column 1"
    assert lines[-1] == "... and 4990 more (5000 problems in all)"


def test_an_empty_input_shows_counts_and_no_mean_of_nothing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = runner.invoke(app, ["score", str(empty), "-o", str(tmp_path / "o.jsonl")])
    assert done.exit_code == 0
    assert "rollouts" in done.output and "mean" not in done.output and "utility" not in done.output


@pytest.mark.parametrize("setting", [
    "preset=[paper]", "preset={a: 1}", "mode=[exact]", "facts=[retrieved]", "omega=[1]",
    "filters={a: 1}", "triple_template=[1]", "prior=null", "max_turns=2.5",
])
def test_a_wrong_typed_setting_is_one_config_line(tmp_path, rollouts, setting):
    field = setting.partition("=")[0]
    done = runner.invoke(app, ["score", str(rollouts), "-o", str(tmp_path / "o.jsonl"), "--set", setting])
    assert done.exit_code == 2 and done.exception is None or isinstance(done.exception, SystemExit)
    (line,) = done.output.strip().splitlines()
    assert line.startswith(f"config: {field}")


def test_serve_on_a_busy_port_is_one_line(tmp_path):
    """Another socket listening on the port -> exit 2, one line saying the port is in use."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "factutil", "serve", "--port", str(port)],
                              capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [(
        f"serve: cannot listen on 127.0.0.1:{port}: the port is in use (another server?); "
        f"pass another port, or 0 for a free one")]
