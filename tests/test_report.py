"""The HTML credit report (factutil.report), its command, its progress bar and its trainer writer.

Numbers on the page are checked against the hand-computed worked example
(tests/test_worked_example.py): its constants are imported, never the report's own output.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import threading
import warnings
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from factutil import FactUtilConfig, compute_process_advantages, read_groups
from factutil.report import (
    GoldError,
    ReportInputs,
    ReportWriter,
    build_report,
    evidence_auc,
    gold_labels,
    load_gold,
    plots,
    select_groups,
    within_group_auc,
    write_report,
    writer,
)
from tests.test_worked_example import EXPECTED, EXPECTED_CLUSTERS, T1, T3, T4, WORKED

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "out"
WORKED_CONFIG = FactUtilConfig(mode="exact", preset="paper")  # the worked example's published form
# Phi of the store after each action of the worked example, in input order, by hand: r1 stores
# c1 (u = 5/12) at its first assert and re-asserts it; r2 stores nothing; r3 stores c0 and c2
# (-1/12 each) at once; q2's s1 stores one cluster of u = -1/4.
POTENTIAL = [0.0, T1, T1, T1, T1, 0.0, 0.0, 0.0, T3, T3, 0.0, T4, T4]


@pytest.fixture(scope="module")
def worked():
    return compute_process_advantages(WORKED, WORKED_CONFIG)


@pytest.fixture
def worked_file(tmp_path):
    path = tmp_path / "worked.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in WORKED), encoding="utf-8")
    return path


def test_potential_column_is_phi_of_the_store_after_each_action(worked):
    np.testing.assert_allclose(worked.action_columns["potential"], POTENTIAL, rtol=0, atol=1e-12)
    assert worked.per_rollout("potential")[("q1", "r3")].tolist() == pytest.approx([0.0, T3, T3])


def test_result_exposes_its_config_and_input_groups(worked):
    assert worked.config is WORKED_CONFIG
    assert [group.uid for group in worked.groups] == ["q1", "q2"]
    assert worked.groups[0].golden_answers == ["Paris"]
    invalid = worked.groups[0].rollouts[1]["actions"][0]
    assert invalid["action"] == "invalid" and invalid["reason"]


# --- reading the page back ---------------------------------------------------------------


class PageTables(HTMLParser):
    """The cluster and action tables of a report page, read from its HTML (or a browser's DOM).

    ``clusters[(uid, cluster_id)]`` and ``actions[(uid, rollout_id, step)]`` hold the cells
    (a number cell reads its tooltip, the value to 7 digits, else its text); ``rollouts``
    the header values (R, A_out) of each rollout.
    """

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.clusters: dict[tuple[str, int], list[dict]] = {}
        self.actions: dict[tuple[str, str, int], list[dict]] = {}
        self.rollouts: dict[tuple[str, str], dict[str, float]] = {}
        self.uid = self.rollout = None
        self.row: list[dict] | None = None
        self.kind = None
        self.cell: dict | None = None
        self.bold: tuple[str, str] | None = None
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "section" and "group" in classes:
            self.uid = attrs["data-uid"]
        elif tag == "div" and "rollout" in classes:
            self.rollout = attrs["data-rollout"]
            self.rollouts[(self.uid, self.rollout)] = {}
        elif tag == "tr" and "cluster" in classes:
            self.row, self.kind = [], ("cluster", self.uid, int(attrs["data-cluster"]))
        elif tag == "tr" and "action" in classes:
            self.row, self.kind = [], ("action", self.uid, self.rollout)
        elif tag == "td" and self.row is not None:
            self.cell = {"title": attrs.get("title"), "text": "", "class": classes}
        elif tag == "b" and {"reward", "outcome"} & set(classes):
            self.bold = ("reward" if "reward" in classes else "outcome", attrs["title"])
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.row.append(self.cell)
            self.cell = None
        elif tag == "tr" and self.row is not None:
            kind, uid, which = self.kind
            if kind == "cluster":
                self.clusters[(uid, which)] = self.row
            else:
                self.actions[(uid, which, int(self.row[0]["text"]))] = self.row
            self.row = None
        elif tag == "b" and self.bold is not None:
            name, title = self.bold
            self.rollouts[(self.uid, self.rollout)][name] = float(title)
            self.bold = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data


def number(cell: dict) -> float:
    return float(cell["title"] if cell["title"] is not None else cell["text"])


def read_tables(html: str) -> PageTables:
    parser = PageTables()
    parser.feed(html)
    return parser


def assert_tables_match_the_worked_example(html: str) -> None:
    """Every cluster and action number on the page equals the hand-computed worked example."""
    page = read_tables(html)
    assert len(page.clusters) == len(EXPECTED_CLUSTERS)
    for want in EXPECTED_CLUSTERS:
        cells = page.clusters[(want["uid"], want["cluster_id"])]
        assert cells[0]["text"].startswith(f"c{want['cluster_id']}")
        for member in want["members"]:  # every wording, as the rollouts wrote it
            assert " | ".join(member) in cells[1]["text"], (want, cells[1])
        assert int(cells[2]["text"]) == want["n"]
        for cell, key in zip(cells[3:6], ("s", "mean", "utility")):
            assert number(cell) == pytest.approx(want[key], rel=1e-6, abs=1e-9), (want, key)
    assert len(page.actions) == len(EXPECTED)
    for want, phi in zip(EXPECTED, POTENTIAL):
        cells = page.actions[(want["uid"], want["rollout_id"], want["step"])]
        where = (want["rollout_id"], want["step"])
        assert cells[1]["text"].startswith(want["action"]), where
        assert [int(c) for c in _chips(cells[3]["text"])] == want["new_clusters"], where
        columns = ("shaping", "back_credit", "penalty", "potential", "process_advantage", "advantage")
        for cell, key in zip(cells[4:10], columns):
            value = phi if key == "potential" else want[key]
            assert number(cell) == pytest.approx(value, rel=1e-6, abs=1e-9), (where, key)
            assert ("p" if value > 0 else "n" if value < 0 else "z") in cell["class"], (where, key)
        header = page.rollouts[(want["uid"], want["rollout_id"])]
        assert header["reward"] == pytest.approx(want["outcome_reward"], abs=1e-9)
        assert header["outcome"] == pytest.approx(want["outcome_advantage"], rel=1e-6, abs=1e-9)


def _chips(text: str) -> list[str]:
    return [part[1:] for part in text.split() if part.startswith("c") and part[1:].isdigit()]


def test_page_tables_hold_the_worked_example_by_hand(worked):
    assert_tables_match_the_worked_example(build_report(worked))


def test_page_tables_check_can_fail(worked):
    right, wrong = f'title="{T1:.7g}"', f'title="{T1 + 1e-4:.7g}"'
    html = build_report(worked).replace(right, wrong, 1)  # the shaping of r1's first assert
    assert wrong in html
    with pytest.raises(AssertionError):
        assert_tables_match_the_worked_example(html)


def test_page_is_self_contained(worked):
    html = build_report(worked, ReportInputs(source="worked.jsonl"))
    assert "<script" not in html.lower()
    assert "default-src 'none'" in html  # the browser refuses any load or script
    links = [value for tag, value in _attributes(html, ("href", "src")) if tag != "svg"]
    assert all(value.startswith("#") for value in links), links
    assert "url(http" not in html and "@import" not in html
    assert html.count("<svg") == 3  # the three plots, inline


def _attributes(html: str, names: tuple[str, ...]) -> list[tuple[str, str]]:
    found = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, value or "") for name, value in attrs if name in names)

    Collect().feed(html)
    return found


def test_page_shows_the_summary_config_and_warnings(worked):
    html = build_report(worked, ReportInputs(source="worked.jsonl"))
    assert "What is the capital?" in html and "Paris" in html
    assert "one rollout" in html  # q2's warning
    # the settings that differ from the defaults, each with its default, and no other
    settings = html.split('id="config"')[1].split("</section>")[0]
    rows = re.findall(r"<tr><td>(\w+)</td><td>([^<]*)</td><td class=\"meta\">default ([^<]*)</td>", settings)
    assert rows == [("preset", "paper", "default"), ("mode", "exact", "semantic"),
                    ("prior", "beta", "group"), ("process_norm", "none", "group")]
    plain = build_report(compute_process_advantages(WORKED, clusterer=OneEach()))
    assert "Every setting has its default" in plain.split('id="config"')[1]
    # actions by kind, by hand from WORKED: 5 searches of 13, 4 asserts, 3 answers, 1 invalid
    for share in ("38.5%", "30.8%", "23.1%", "7.7%"):
        assert f">{share}<" in html


class OneEach:
    """A clusterer with a cluster per fact, without a model: a default-config result for free."""

    def __init__(self):
        self.metrics = {}

    def cluster_batch(self, facts_per_group):
        return [np.arange(len(facts), dtype=np.int64) for facts in facts_per_group]


def test_the_glossary_comes_first_and_defines_every_column_and_summary_term(worked):
    """"How to read this page" is the first section, before the summary and the plots, and each
    header of the cluster and action tables and each term of the question list has its entry."""
    html = build_report(worked, ReportInputs(source="worked.jsonl"))
    ids = [value for tag, value in _attributes(html, ("id",)) if tag == "section"]
    assert ids[:3] == ["reading", "summary", "plots"]
    glossary = html.split('id="reading"')[1].split("</section>")[0]
    defined = " ".join(re.findall(r"<dt>(.*?)</dt>", glossary))
    headers = {cell for table in re.findall(r'<table class="(?:clusters|actions)">(.*?)</tr>', html, re.DOTALL)
               for cell in re.findall(r"<th>([^<]*)</th>", table) if cell}
    named = {"#", "action", "what", "cluster", "new clusters", "members (as the rollouts wrote them)"}
    terms = headers - named | {"spread", "R", "A_out"}
    for term in terms:
        assert any(word in defined for word in (term, term.split()[0])), term


def test_a_cluster_held_by_one_rollout_is_marked_too_few_to_tell(worked):
    """n = 1 clusters (one rollout's outcome, no evidence about the fact) carry the mark, the
    others not: every cluster of the worked example (each held by one rollout), and a fact two
    rollouts assert (n = 2) beside one that only the second asserts (n = 1)."""
    def marked(html):
        rows = re.findall(r'<tr class="cluster" data-cluster="(\d+)"( data-few)?>(.*?)</tr>', html, re.DOTALL)
        assert all(bool(few) == ("too few to tell" in row) for _, few, row in rows)
        return {int(c): bool(few) for c, few, _ in rows}

    assert set(marked(build_report(worked, ReportInputs(uids=["q1"]))).values()) == {True}
    fact, other = ["France", "capital", "Paris"], ["France", "capital", "Lyon"]
    rows = [dict(WORKED[0], rollout_id=name, actions=[
        {"action": "assert", "triples": triples}, {"action": "answer", "answer": answer}])
        for name, triples, answer in (("a", [fact], "Paris"), ("b", [fact, other], "Lyon"))]
    result = compute_process_advantages(rows, {"mode": "exact"})
    n = {c.cluster_id: c.n for c in result.clusters}
    assert sorted(n.values()) == [1, 2]
    assert marked(build_report(result)) == {c: count == 1 for c, count in n.items()}


def test_signs_are_not_coloured_as_errors():
    """Positive and negative numbers are blue and orange, not red or green; back-credit (a
    transfer) and Phi (a state) have no background; red is left to invalid actions."""
    import colorsys

    css = (REPO / "factutil" / "report" / "templates" / "report.css").read_text()
    for name in ("--pos", "--neg"):
        colour = re.search(rf"{name}: #(\w{{6}})", css).group(1)
        hue = colorsys.rgb_to_hsv(*(int(colour[i:i + 2], 16) / 255 for i in (0, 2, 4)))[0] * 360
        assert 20 <= hue <= 260 and not 80 <= hue <= 160, (name, hue)  # neither red nor green
    assert "table.actions td:nth-child(6), table.actions td:nth-child(8) { background: none; }" in css
    assert ".k-invalid { color: var(--error); }" in css and "--error: #b42318" in css


def test_settings_link_lands_on_an_open_config_table(worked):
    """The header's "settings" link points at #config, which is a section shown open (a
    collapsed <details> would hide what the link promises; the page has no script to open it)."""
    html = build_report(worked, ReportInputs(source="worked.jsonl"))
    assert ("a", "#config") in _attributes(html, ("href",))
    tags = [tag for tag, value in _attributes(html, ("id",)) if value == "config"]
    assert tags == ["section"]
    assert "<details" not in html.split('id="config"')[1].split("</section>")[0]


def test_potential_band_is_the_median_and_quartiles_per_step_by_hand():
    from factutil.report.plots import potential_band

    # Three rollouts: Phi after each action; an ended rollout keeps its last Phi.
    # step 0: 0, 0, 0; step 1: 0.2, 0.4, -0.2; step 2: 0.2 (kept), 0.6, 0 ; step 3: 0.2, 0.6, 0.1
    low, median, high, count = potential_band([[0.2], [0.4, 0.6], [-0.2, 0.0, 0.1]])
    assert count == 3
    assert median == pytest.approx([0.0, 0.2, 0.2, 0.2])
    # numpy's linear percentiles of three values a <= b <= c: p25 = (a + b) / 2, p75 = (b + c) / 2
    assert low == pytest.approx([0.0, 0.0, 0.1, 0.15])
    assert high == pytest.approx([0.0, 0.3, 0.4, 0.4])
    assert potential_band([]) is None


def test_a_report_of_no_rollout_raises_no_user_warning(tmp_path):
    # matplotlib warns (UserWarning) on a legend with nothing labelled: no rollout, no band
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        page = write_report(compute_process_advantages([]), tmp_path / "empty.html")
    assert "<svg" in page.read_text(encoding="utf-8")


# --- which questions are shown --------------------------------------------------------------


def test_groups_with_the_widest_utility_spread_come_first(worked):
    # q1's utilities span 5/12 - (-1/12) = 0.5; q2 has one cluster: spread 0.
    assert select_groups(worked, None) == [0, 1]
    reordered = compute_process_advantages(WORKED[3:] + WORKED[:3], WORKED_CONFIG)
    assert [reordered.groups[g].uid for g in select_groups(reordered, None)] == ["q1", "q2"]
    assert select_groups(worked, 1) == [0]
    assert select_groups(worked, 0) == [0, 1]
    assert select_groups(worked, 5, uids=["q2"]) == [1]
    with pytest.raises(ValueError, match="uid 'q9' is not in the input"):
        select_groups(worked, 5, uids=["q9"])
    with pytest.raises(ValueError, match="max_groups must be >= 0, got -1"):
        select_groups(worked, -1)
    page = read_tables(build_report(worked, ReportInputs(max_groups=1)))
    assert {uid for uid, _ in page.clusters} == {"q1"}


# --- gold evidence --------------------------------------------------------------------------


def test_gold_labels_and_aucs_by_hand(worked):
    # q1: c1 (Paris, u = 5/12) is gold; c0, c2 (-1/12) are distractors; q2 has no gold entry.
    gold = {"q1": [["FRANCE", "capital", " paris"]]}
    labels = gold_labels(worked.clusters, gold)
    assert labels == [False, True, False, None]
    utilities = [cluster.utility for cluster in worked.clusters]
    uids = [cluster.uid for cluster in worked.clusters]
    assert evidence_auc(labels, utilities) == 1.0
    assert within_group_auc(labels, utilities, uids) == 1.0
    # q2's only cluster (u = -1/4) gold too: pooled, it loses to both distractors -> 2 wins of 4;
    # within a question it meets no distractor, so q1's two pairs alone count.
    gold["q2"] = [["Japan", "capital", "Tokyo"]]
    labels = gold_labels(worked.clusters, gold)
    assert evidence_auc(labels, utilities) == 0.5
    assert within_group_auc(labels, utilities, uids) == 1.0
    assert evidence_auc([True, None], [0.1, 0.2]) is None


def test_load_gold_accepts_both_layouts_and_names_bad_entries(tmp_path):
    path = tmp_path / "gold.json"
    path.write_text(json.dumps({"q1": {"gold": [["a", "b", "c"]], "question": "?"},
                                "q2": [["d", "e", "f"]]}), encoding="utf-8")
    assert load_gold(path) == {"q1": [["a", "b", "c"]], "q2": [["d", "e", "f"]]}
    path.write_text(json.dumps({"q1": {"gold": [["a", "b", "c"], ["a", " "]]}}), encoding="utf-8")
    with pytest.raises(GoldError, match=r"gold.json: 'q1': gold\[1\]: expected 3 non-blank strings"):
        load_gold(path)
    path.write_text(json.dumps({"q1": {"evidences": [["a", "b", "c"]]}}), encoding="utf-8")
    with pytest.raises(GoldError) as caught:  # an object whose triples sit under another key
        load_gold(path)
    assert str(caught.value).endswith(
        "gold.json: 'q1': gold: expected a list of triples, got no `gold` key (keys ['evidences'])")
    path.write_text(json.dumps({"q1": {"gold": None}}), encoding="utf-8")  # a key, its value null
    with pytest.raises(GoldError) as caught:
        load_gold(path)
    assert str(caught.value).endswith("'q1': gold: expected a list of triples, got None")
    path.write_text(json.dumps({"q1": {"gold": "a b c"}}), encoding="utf-8")
    with pytest.raises(GoldError, match=r"'q1': gold: expected a list of triples, got 'a b c'"):
        load_gold(path)
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(GoldError, match="expected a JSON object keyed by uid, got list"):
        load_gold(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(GoldError, match="invalid JSON"):
        load_gold(path)
    with pytest.raises(GoldError, match="cannot read"):
        load_gold(tmp_path / "none.json")


def test_gold_section_on_the_page(worked):
    html = build_report(worked, ReportInputs(gold={"q1": [["France", "capital", "Paris"]]}))
    assert 'id="auc">1.000<' in html and html.count("★ gold</span>") == 1


# --- without matplotlib --------------------------------------------------------------------


def test_without_matplotlib_the_page_says_how_to_install_it(worked, monkeypatch):
    monkeypatch.setattr(plots, "matplotlib_missing", lambda: "plots left out: no matplotlib "
                        f"({plots.INSTALL_HINT})")
    html = build_report(worked)
    assert "<svg" not in html
    assert "pip install &#39;factutil[report]&#39;" in html
    assert_tables_match_the_worked_example(html)


def test_cli_without_matplotlib_says_how_to_install_it(worked_file, tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from factutil.cli import main; "
        f"sys.argv = ['factutil', 'report', {str(worked_file)!r}, '-o', {str(tmp_path / 'r.html')!r},"
        " '--set', 'mode=exact', '--set', 'preset=paper']; main()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "plots left out: matplotlib is not installed (pip install 'factutil[report]')" in done.stderr
    assert "<svg" not in (tmp_path / "r.html").read_text(encoding="utf-8")


# --- the command ---------------------------------------------------------------------------


def _factutil(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE",
                                                             "TTY_INTERACTIVE")}
    return subprocess.run([sys.executable, "-m", "factutil", *args], capture_output=True,
                          text=True, check=False, env=env, **kwargs)


def test_cli_report_writes_the_page(worked_file, tmp_path):
    target = tmp_path / "sub" / "report.html"
    done = _factutil("report", str(worked_file), "-o", str(target), "--set", "mode=exact", "--set", "preset=paper")
    assert done.returncode == 0, done.stderr
    assert f"wrote {target}" in done.stdout and "2 of 2 questions in full" in done.stdout
    assert f"created folder {target.parent}" in done.stdout.replace("\n", "")  # as score says it
    assert_tables_match_the_worked_example(target.read_text(encoding="utf-8"))
    one = _factutil("report", str(worked_file), "-o", str(target), "--set", "mode=exact", "--set", "preset=paper",
                    "--uid", "q2")
    assert one.returncode == 0 and "1 of 2 questions" in one.stdout and "created folder" not in one.stdout
    assert {uid for uid, _ in read_tables(target.read_text(encoding="utf-8")).clusters} == {"q2"}


def test_cli_report_bad_arguments_exit_2_with_one_line(worked_file, tmp_path):
    target = tmp_path / "report.html"
    done = _factutil("report", str(worked_file), "-o", str(target), "--set", "mode=exact", "--set", "preset=paper",
                     "--uid", "nope")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # (the line before is the warning of q2's single rollout, from the logger)
    assert done.stderr.strip().splitlines()[-1] == (
        "--uid: uid 'nope' is not in the input (2 groups, e.g. 'q1', 'q2')"
    )
    bad_gold = tmp_path / "gold.json"
    bad_gold.write_text('{"q1": [["a", "b"]]}', encoding="utf-8")
    done = _factutil("report", str(worked_file), "-o", str(target), "--gold", str(bad_gold))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"--gold: {bad_gold}: 'q1': (value)[0]: expected 3 non-blank strings, got ['a', 'b']"
    )
    assert not target.exists()


def test_cli_report_gold_flag_adds_the_auc(worked_file, tmp_path):
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"q1": {"gold": [["France", "capital", "Paris"]]}}), encoding="utf-8")
    target = tmp_path / "report.html"
    done = _factutil("report", str(worked_file), "-o", str(target), "--set", "mode=exact", "--set", "preset=paper",
                     "--gold", str(gold))
    assert done.returncode == 0, done.stderr
    assert 'id="auc">1.000<' in target.read_text(encoding="utf-8")


# --- progress bar: on a terminal, not in a pipe --------------------------------------------


def _run_with_terminal_stderr(args: list[str]) -> tuple[int, str]:
    """Run ``factutil ARGS`` with stderr on a pseudo-terminal; (exit status, what it drew)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE",
                                                             "TTY_INTERACTIVE")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    process = subprocess.Popen([sys.executable, "-m", "factutil", *args], stdout=subprocess.PIPE,
                               stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        elif process.poll() is not None:
            break
    process.stdout.read()
    os.close(master)
    return process.wait(), drawn.decode("utf-8", "replace")


@pytest.mark.parametrize("command", ["score", "clusters", "report"])
def test_progress_bar_on_a_terminal_and_quiet_in_a_pipe(command, worked_file, tmp_path):
    args = [command, str(worked_file), "--set", "mode=exact", "--set", "preset=paper"]
    if command != "clusters":
        args += ["-o", str(tmp_path / ("out.html" if command == "report" else "out.jsonl"))]
    status, drawn = _run_with_terminal_stderr(args)
    assert status == 0, drawn
    assert "reading worked.jsonl" in drawn and "scoring 2 groups" in drawn
    if command != "clusters":
        assert "writing out." in drawn
    piped = _factutil(*args)
    assert piped.returncode == 0
    # Only the logger's warning of q2's single rollout; no bar, no escape code.
    assert piped.stderr == "group 'q2' has one rollout: outcome advantage 0 (no baseline)\n"


# --- the trainer's writer ------------------------------------------------------------------


def test_report_writer_writes_every_nth_step(worked, tmp_path):
    reports = ReportWriter(tmp_path / "reports", every=2)
    started = []
    for step in range(1, 6):
        started.append(reports.submit(worked, step))
        assert reports.wait(60)
    assert started == [None, reports.path(2), None, reports.path(4), None]
    assert reports.written == [tmp_path / "reports" / "step_000002.html",
                               tmp_path / "reports" / "step_000004.html"]
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "step_000002.html", "step_000004.html"]
    assert_tables_match_the_worked_example(reports.written[0].read_text(encoding="utf-8"))
    never = ReportWriter(tmp_path / "never", every=0)
    assert [never.submit(worked, step) for step in range(1, 4)] == [None] * 3
    assert not (tmp_path / "never").exists()
    with pytest.raises(ValueError, match="report_every must be >= 0, got -1"):
        ReportWriter(tmp_path, every=-1)


def test_report_writer_never_raises_and_logs_one_failure(worked, tmp_path, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(writer, "write_report", broken)
    reports = ReportWriter(tmp_path, every=1)
    with caplog.at_level(logging.ERROR, logger="factutil"):
        for step in (1, 2, 3):
            assert reports.submit(worked, step) == reports.path(step)
            assert reports.wait(60)
        monkeypatch.setattr(ReportWriter, "path", broken)  # failing before the thread starts
        assert reports.submit(worked, 4) is None
    assert reports.failures == 4 and reports.written == []
    failures = [record for record in caplog.records if "report of step" in record.getMessage()]
    assert len(failures) == 1 and "disk full" in caplog.text


def test_report_writer_skips_a_step_while_the_last_report_is_written(worked, tmp_path, monkeypatch):
    release = threading.Event()
    real = writer.write_report

    def slow(*args, **kwargs):
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(writer, "write_report", slow)
    reports = ReportWriter(tmp_path, every=1)
    assert reports.submit(worked, 1) == reports.path(1)
    assert reports.submit(worked, 2) is None and reports.skipped == 1
    release.set()
    assert reports.wait(60)
    assert reports.written == [reports.path(1)]


def test_write_report_is_atomic(worked, tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("old", encoding="utf-8")
    monkeypatch.setattr("factutil.report.page.build_report", lambda *a, **k: None)
    with pytest.raises(TypeError):  # fails while writing the temporary file
        write_report(worked, target)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


# --- in a real browser ---------------------------------------------------------------------


def _chromium() -> str:
    """The Chromium executable; skip where it is absent, fail in CI (``make browser`` installs it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("chromium is not installed; CI installs it with `make browser` (Debian package)")
    pytest.skip("chromium is not installed (make browser)")


def _browse(chromium: str, page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *action,
         page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )


def _console_messages(stderr: str) -> list[str]:
    """The page's console output (script errors, refused loads) as Chromium logs it."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_report_in_headless_chromium(worked, tmp_path):
    chromium = _chromium()
    page = write_report(worked, tmp_path / "worked.html", ReportInputs(source="worked example"))
    shown = _browse(chromium, page, tmp_path / "profile", "--dump-dom")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert _console_messages(shown.stderr) == []
    assert_tables_match_the_worked_example(shown.stdout)
    assert "How to read this page" in shown.stdout
    OUT.mkdir(exist_ok=True)
    shot = OUT / "report_worked_example.png"
    shot.unlink(missing_ok=True)
    done = _browse(chromium, page, tmp_path / "profile", f"--screenshot={shot}",
                   "--window-size=1400,2000")
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]
    # The console check sees what a broken page would log: a blocked load and a script.
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text(encoding="utf-8").replace(
        "</main>", '<img src="https://example.com/x.png"><script>1</script></main>'), encoding="utf-8")
    refused = _console_messages(_browse(chromium, broken, tmp_path / "profile", "--dump-dom").stderr)
    assert len(refused) == 2, refused


def test_sample_report_in_headless_chromium(tmp_path):
    chromium = _chromium()
    sample = REPO / "examples" / "data"
    result = compute_process_advantages(sample / "2wiki_rollouts.jsonl", FactUtilConfig(mode="exact"))
    page = write_report(result, tmp_path / "2wiki.html", ReportInputs(
        source="examples/data/2wiki_rollouts.jsonl", gold=load_gold(sample / "2wiki_gold.json")))
    shown = _browse(chromium, page, tmp_path / "profile", "--dump-dom")
    assert shown.returncode == 0 and _console_messages(shown.stderr) == []
    tables = read_tables(shown.stdout)
    assert len(tables.clusters) == len(result.clusters) and len(tables.actions) == len(result.actions)
    OUT.mkdir(exist_ok=True)
    shot = OUT / "report_2wiki_sample.png"
    done = _browse(chromium, page, tmp_path / "profile", f"--screenshot={shot}",
                   "--window-size=1400,2000")
    assert done.returncode == 0 and shot.stat().st_size > 10_000


def test_reading_reports_progress_in_bytes(tmp_path):
    path = tmp_path / "big.jsonl"
    rows = [dict(WORKED[0], rollout_id=f"r{i}", actions=[
        {"action": "search", "query": "q", "observation": "x" * 100_000},
        {"action": "answer", "answer": "Paris"}]) for i in range(25)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    calls: list[int] = []
    groups = read_groups(path, calls.append)
    assert len(groups[0].rollouts) == 25
    assert sum(calls) == path.stat().st_size and len(calls) == 3  # 2.5 MB: two full MiB, the rest
