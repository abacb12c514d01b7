"""benchmarks/load_prepared.py runs, writes its JSON, and both ways give the clusterer the same work."""

from __future__ import annotations

import json

from benchmarks.load_prepared import main


def test_load_prepared_benchmark_reports_both_ways(tmp_path):
    out = tmp_path / "load.json"
    report = main(["--size", "S", "--runs", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["items"] == 64 * 6  # workload S: 64 groups of 6 rollouts, one item each
    assert report["same"] is True
    assert 0 < report["distinct_facts"] <= report["facts"]
    assert set(report["seconds"]) == {f"{way}, collector {state}"
                                      for way in ("per item", "load_prepared")
                                      for state in ("on", "paused")}
