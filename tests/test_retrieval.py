"""factutil.retrieval: Search-R1's /retrieve API over BM25, its client, and ``factutil serve``.

Network only on 127.0.0.1; every server here is bounded and shut down by the test.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from factutil.retrieval import (
    DEFAULT_CORPUS,
    BM25Retriever,
    Document,
    Passage,
    RetrievalClient,
    RetrieveRequest,
    format_observation,
    load_corpus,
    make_server,
    parse_reply,
    retrieve_reply,
    split_contents,
)

pytest.importorskip("bm25s")

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "2wiki_rollouts.jsonl"


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever(load_corpus(DEFAULT_CORPUS))


@pytest.fixture(scope="module")
def url(retriever: BM25Retriever) -> Iterator[str]:
    server = make_server(retriever, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def post(url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_bundled_corpus_loads(retriever: BM25Retriever):
    assert len(retriever.documents) == 6119
    first = retriever.documents[0]
    assert first.id == "0" and first.title and first.text
    assert first.contents == f'"{first.title}"\n{first.text}'


def test_every_search_of_the_bundled_sample_is_reproduced_byte_for_byte(retriever: BM25Retriever):
    searches = [
        action
        for line in SAMPLE.read_text(encoding="utf-8").splitlines()
        for action in json.loads(line)["actions"]
        if action.get("action") == "search"
    ]
    assert len(searches) == 350
    for action in searches:
        hits = retriever.search([action["query"]], 3)[0]
        observation = format_observation(Passage(doc.title, doc.text, score) for doc, score in hits)
        assert observation == action["observation"], action["query"]


def test_search_is_deterministic_and_returns_k_even_for_unknown_words(retriever: BM25Retriever):
    first = retriever.search(["Polish-Russian War director", "zzzqqq"], 5)
    assert first == retriever.search(["Polish-Russian War director", "zzzqqq"], 5)
    assert first[0][0][0].title == "Aleksander Ford"
    assert [score for _, score in first[0]] == sorted(
        (score for _, score in first[0]), reverse=True
    )
    assert len(first[1]) == 5 and all(score == 0.0 for _, score in first[1])
    with pytest.raises(ValueError, match="topk"):
        retriever.search(["x"], 0)


def test_reply_shapes(retriever: BM25Retriever):
    scored = retrieve_reply(
        retriever, RetrieveRequest(queries=["Aleksander Ford"], topk=2, return_scores=True)
    )
    plain = retrieve_reply(retriever, RetrieveRequest(queries="Aleksander Ford", topk=2))
    assert (
        list(scored) == ["result"] and len(scored["result"]) == 1 and len(scored["result"][0]) == 2
    )
    hit = scored["result"][0][0]
    assert set(hit) == {"document", "score"} and hit["score"] > 0
    assert set(hit["document"]) == {"id", "contents", "title", "text"}
    assert plain["result"][0][0] == hit["document"]
    assert (
        retrieve_reply(retriever, RetrieveRequest(queries=["x"]), default_topk=4)["result"][
            0
        ].__len__()
        == 4
    )


def test_the_http_api(url: str):
    status, body = post(
        f"{url}/retrieve",
        {"queries": ["Polish-Russian War director"], "topk": 3, "return_scores": True},
    )
    assert status == 200
    passages = parse_reply(body)[0]
    assert passages[0].title == "Aleksander Ford" and passages[0].score > 0
    status, body = post(f"{url}/retrieve", {"queries": ["a", "b"]})  # Search-R1's default topk: 3
    assert status == 200 and [len(hits) for hits in body["result"]] == [3, 3]
    assert all("score" not in doc for doc in body["result"][0])
    assert post(f"{url}/retrieve", {"queries": ["a"], "topk": 0}) == (
        422,
        {"error": "topk: Input should be greater than or equal to 1"},
    )
    status, body = post(f"{url}/retrieve", b"{not json")
    assert status == 400 and body["error"].startswith("body is not JSON")
    assert post(f"{url}/nope", {"queries": ["a"]})[0] == 404
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok", "documents": 6119}
    # GET on the retrieve path: the path exists, the method does not -> 405 naming POST.
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}/retrieve", timeout=10)
    assert caught.value.code == 405 and caught.value.headers["Allow"] == "POST"
    assert json.loads(caught.value.read()) == {"error": "/retrieve takes POST with a JSON body"}
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}/nope", timeout=10)
    assert caught.value.code == 404


def test_parse_reply_reads_both_search_r1_shapes():
    contents = '"Paris"\nParis is the capital of France.'
    with_scores = {"result": [[{"document": {"id": "1", "contents": contents}, "score": 3.5}]]}
    without = {"result": [[{"id": "1", "contents": contents}]]}
    assert parse_reply(with_scores) == [[Passage("Paris", "Paris is the capital of France.", 3.5)]]
    assert parse_reply(without) == [[Passage("Paris", "Paris is the capital of France.", None)]]
    assert parse_reply({"result": [[{"title": "T", "text": "x"}], []]}) == [[Passage("T", "x")], []]
    assert split_contents("Untitled first line\nbody") == ("Untitled first line", "body")
    for bad in (
        {"results": []},
        {"result": "x"},
        {"result": [[42]]},
        {"result": [[{"id": "1"}]]},
        [],
    ):
        with pytest.raises(ValueError):
            parse_reply(bad)
    assert format_observation([]) == "No documents found."
    assert (
        format_observation([Passage("A", "a"), Passage("B", "b")])
        == "Doc 1 (Title: A) a\nDoc 2 (Title: B) b"
    )


def test_load_corpus_forms_and_errors(tmp_path: Path):
    jsonl = tmp_path / "wiki.jsonl"
    jsonl.write_text(
        '{"id": "7", "contents": "\\"Ada\\"\\nAda Lovelace wrote programs."}\n\n{"title": "B", "text": "b"}\n'
    )
    assert load_corpus(jsonl) == [
        Document("7", "Ada", "Ada Lovelace wrote programs."),
        Document("1", "B", "b"),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "A", "text": "a"}\n{"title": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: a document needs"):
        load_corpus(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(ValueError, match="no document"):
        load_corpus(empty)


class _Handler(BaseHTTPRequestHandler):
    delay = 0.0
    status = 200
    body = b"{}"
    hits = 0

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(self.delay)
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def _with_server(**attributes: Any):
    handler = type("H", (_Handler,), {"hits": 0, **attributes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler, f"http://127.0.0.1:{server.server_address[1]}/retrieve"


def test_the_client_turns_every_failure_into_an_observation(url: str):
    ok = RetrievalClient(f"{url}/retrieve", topk=2, max_observation_chars=120).search(
        "Polish-Russian War director"
    )
    assert (
        ok.ok
        and ok.observation.startswith("Doc 1 (Title: Aleksander Ford)")
        and len(ok.observation) == 120
    )

    cases = [
        (
            {"delay": 1.0},
            {"timeout_s": 0.2, "retries": 1},
            "the retriever timed out after 0.2 s",
            2,
        ),
        ({"status": 503}, {"retries": 2}, "HTTP 503 from the retriever", 3),
        ({"status": 404}, {"retries": 2}, "HTTP 404 from the retriever", 1),
        ({"body": b"not json"}, {"retries": 0}, "malformed reply", 1),
        (
            {"body": b'{"result": [[1]]}'},
            {"retries": 3},
            "malformed reply (a retrieved document must be an object",
            1,
        ),
    ]
    for handler_attributes, client_options, error, hits in cases:
        server, handler, endpoint = _with_server(**handler_attributes)
        try:
            result = RetrievalClient(endpoint, **client_options).search("q")
        finally:
            server.shutdown()
            server.server_close()
        assert not result.ok and result.error.startswith(error), result.error
        assert result.observation == f"Search failed: {result.error}."
        assert handler.hits == hits

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = RetrievalClient(f"http://127.0.0.1:{port}/retrieve", retries=0).search("q")
    assert result.error.startswith("the retriever is unreachable")
    with pytest.raises(ValueError, match="timeout_s"):
        RetrievalClient("http://127.0.0.1:1/retrieve", timeout_s=0)


def test_factutil_serve_is_one_command(tmp_path: Path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"title": f"T{i}", "text": f"fact number {i} about topic{i % 3}"})
            for i in range(20)
        )
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "factutil",
            "serve",
            "--corpus",
            str(corpus),
            "--port",
            "0",
            "--topk",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:") and "(20 documents" in line
        endpoint = line.split()[2]
        status, body = post(endpoint, {"queries": ["topic1"]})
        assert status == 200 and len(body["result"][0]) == 2
        assert all(doc["title"] in {f"T{i}" for i in range(1, 20, 3)} for doc in body["result"][0])
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()

    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "factutil",
            "serve",
            "--corpus",
            str(tmp_path / "none.json"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().startswith("serve: ") and "none.json" in missing.stderr


def test_import_factutil_stays_light():
    modules = ("bm25s", "factutil.retrieval", "http.server")
    code = f"import sys, factutil; print(json.dumps([m in sys.modules for m in {modules!r}]))"
    completed = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == [False, False, False]
