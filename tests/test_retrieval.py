"""factutil.tools.retrieval: Search-R1's /retrieve API over BM25, its client, and ``factutil serve``.

Network only on 127.0.0.1; every server here is bounded and shut down by the test.
"""

from __future__ import annotations

import json
import logging
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

from factutil.tools.retrieval import (
    DEFAULT_CORPUS,
    BM25Retriever,
    Document,
    Passage,
    RetrievalClient,
    format_observation,
    load_corpus,
    parse_reply,
    split_contents,
)

pytest.importorskip("bm25s")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from factutil.tools.retrieval.server import (  # after the skips: needs the retrieval extra
    RetrieveRequest,
    retrieve_reply,
    running_server,
)

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data" / "2wiki_rollouts.jsonl"


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever(load_corpus(DEFAULT_CORPUS))


@pytest.fixture(scope="module")
def url(retriever: BM25Retriever) -> Iterator[str]:
    """The server's base URL (``/retrieve`` and ``/health`` below it)."""
    with running_server(retriever) as endpoint:
        yield endpoint.removesuffix("/retrieve")


def post(url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def problems(body: dict) -> list[tuple[str, str]]:
    """FastAPI's 422 ``detail`` as (field path, message) pairs, e.g. ("body.topk", "Input ...")."""
    return [(".".join(str(part) for part in item["loc"]), item["msg"]) for item in body["detail"]]


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
    plain = retrieve_reply(retriever, RetrieveRequest(queries=["Aleksander Ford"], topk=2))
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
    status, body = post(f"{url}/retrieve", {"queries": ["a"], "topk": 0})
    assert (status, problems(body)) == (
        422, [("body.topk", "Input should be greater than or equal to 1")])
    status, body = post(f"{url}/retrieve", b"{not json")  # FastAPI: malformed JSON is a 422
    assert status == 422 and body["detail"][0]["type"] == "json_invalid"
    assert post(f"{url}/nope", {"queries": ["a"]}) == (404, {"detail": "Not Found"})
    with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok", "documents": 6119}
    # GET on the retrieve path: the path exists, the method does not -> 405 naming POST.
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{url}/retrieve", timeout=10)
    assert caught.value.code == 405 and caught.value.headers["Allow"] == "POST"
    assert json.loads(caught.value.read()) == {"detail": "Method Not Allowed"}
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
    with pytest.raises(ValueError, match=r"bad.jsonl:2: a retrieved document must be an object"):
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


def test_the_default_corpus_ships_inside_the_package():
    tomllib = pytest.importorskip("tomllib")

    import factutil

    package = Path(factutil.__file__).resolve().parent
    assert DEFAULT_CORPUS.resolve().is_relative_to(package / "tools" / "data")
    assert not DEFAULT_CORPUS.is_symlink()
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = pyproject["tool"]["setuptools"]["package-data"]["factutil.tools"]
    assert any(DEFAULT_CORPUS.relative_to(package / "tools").match(pattern) for pattern in shipped)
    # 6,119 paragraphs: the HippoRAG 2wikimultihopqa corpus (examples/data/README.md).
    assert len(json.loads(DEFAULT_CORPUS.read_text(encoding="utf-8"))) == 6119


def test_no_method_step_imports_the_tools():
    import ast

    import factutil

    package = Path(factutil.__file__).resolve().parent
    steps = ["metrics", "linkage", "utility", "shaping", "advantages", "workers"]
    files = [package / f"{name}.py" for name in steps] + sorted(
        path for folder in ("cluster", "embed", "filters") for path in (package / folder).glob("*.py"))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )
            for name in names:
                assert not name.startswith("factutil.tools"), (
                    f"{path.name} imports {name}"
                )


def test_import_factutil_stays_light():
    modules = ("bm25s", "factutil.tools", "factutil.tools.retrieval", "fastapi", "uvicorn")
    code = f"import sys, factutil; print(json.dumps([m in sys.modules for m in {modules!r}]))"
    completed = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == [False, False, False, False, False]


def test_the_client_needs_no_server_dependency_and_serve_says_how_to_install_them():
    """Without fastapi and uvicorn (the `retrieval` extra) the client and the index still import,
    and `factutil serve` exits 2 naming the extra to install."""
    hide = "import sys; sys.modules['fastapi'] = sys.modules['uvicorn'] = None; "
    client = subprocess.run(
        [sys.executable, "-c", hide + "from factutil.tools.retrieval import RetrievalClient, "
         "BM25Retriever; import factutil.tools.retrieval.client"],
        capture_output=True, text=True, timeout=120, check=False)
    assert client.returncode == 0, client.stderr
    serve = subprocess.run(
        [sys.executable, "-c", hide + "sys.argv = ['factutil', 'serve', '--port', '0']; "
         "from factutil.cli import main; main()"],
        capture_output=True, text=True, timeout=120, check=False)
    assert serve.returncode == 2
    assert serve.stderr.strip() == (
        "serve: the retrieval server needs fastapi and uvicorn: pip install 'factutil[retrieval]'")


# --- bad requests: each a clear 4xx in bounded time, never a 500 or a hang ---------------------


@pytest.fixture(scope="module")
def strict_url(retriever: BM25Retriever) -> Iterator[str]:
    """A server whose clients may stay silent 1 s mid-body (the default is 10 s)."""
    with running_server(retriever, request_timeout_s=1.0) as endpoint:
        yield endpoint.removesuffix("/retrieve")


def raw_exchange(url: str, request: bytes, wait_s: float = 60.0) -> tuple[bytes, float]:
    """Send raw bytes on a fresh connection; read until the server closes it. Returns (everything
    read, seconds until the server closed the connection); fails when it is still open after
    ``wait_s`` (a generous bound: a hang, not a slow machine)."""
    host, port = url.split("//", 1)[1].split(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=wait_s) as connection:
        connection.sendall(request)
        chunks = []
        try:
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pytest.fail(f"the server kept the connection open for {wait_s} s")
    return b"".join(chunks), time.perf_counter() - started


def status_of(raw: bytes) -> tuple[int, bytes, bytes]:
    """(status, header block, body) of one raw HTTP reply."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


def test_queries_given_as_a_string_is_a_422_naming_queries(url: str):
    """{"queries": "capital of France"} -> 422 naming body.queries (Search-R1's QueryRequest takes a
    list; a string is a client bug, not one query)."""
    status, body = post(f"{url}/retrieve", {"queries": "capital of France"})
    assert (status, problems(body)) == (422, [("body.queries", "Input should be a valid list")])


@pytest.mark.parametrize("body,status,field,message", [
    ({"queries": ["a"], "topk": 10**9}, 422, "body.topk",
     "Input should be less than or equal to 100"),
    ({"queries": ["a"], "topk": 2.5}, 422, "body.topk", "Input should be a valid integer"),
    ({"queries": ["a"] * 1025}, 422, "body.queries", "List should have at most 1024 items"),
    ({"queries": [1]}, 422, "body.queries.0", "Input should be a valid string"),
    ([{"queries": ["a"]}], 422, "body", "Input should be a valid dictionary"),
    (b"{not json", 422, "body.1", "JSON decode error"),
    (b"\xff\xfe\x00{", 422, "body.0", "JSON decode error"),
    (b"", 422, "body", "Field required"),
])
def test_bad_bodies_are_a_422_naming_the_field(url: str, body: Any, status: int, field: str,
                                               message: str):
    """A huge or fractional topk, too many queries, a non-string query, a list body, malformed
    JSON, bytes that are not UTF-8, no body -> FastAPI's 422, its detail naming the field."""
    got_status, got = post(f"{url}/retrieve", body)
    assert got_status == status and len(got["detail"]) == 1, got
    (got_field, got_message), = problems(got)
    assert got_field == field and got_message.startswith(message), got


def test_json_nested_too_deeply_is_a_400(url: str):
    """JSON nested 100,000 deep: the parser's RecursionError -> FastAPI's 400, never a 500."""
    assert post(f"{url}/retrieve", b"[" * 100_000) == (
        400, {"detail": "There was an error parsing the body"})


def test_an_empty_query_list_is_answered_with_an_empty_result(url: str):
    assert post(f"{url}/retrieve", {"queries": []}) == (200, {"result": []})


def test_a_body_without_content_type_is_read_as_json_and_another_type_is_a_422(url: str):
    head = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    body = b'{"queries": ["Polish-Russian War director"], "topk": 1}'
    length = b"Content-Length: %d\r\n\r\n" % len(body)
    status, _, reply = status_of(raw_exchange(url, head + length + body)[0])
    assert status == 200 and json.loads(reply)["result"][0][0]["title"] == "Aleksander Ford"
    status, _, reply = status_of(
        raw_exchange(url, head + b"Content-Type: text/plain\r\n" + length + body)[0])
    assert (status, problems(json.loads(reply))[0][0]) == (422, "body")


@pytest.mark.parametrize("length", [b"abc", b"-5", b"\xb2", b"7" * 4301])
def test_a_content_length_that_is_no_count_is_a_400_and_the_connection_closes(
    url: str, length, caplog
):
    """Content-Length "abc", "-5", "²" (Latin-1 0xB2: str.isdigit() takes it, int() does not,
    werkzeug #2716) or 4,301 digits (past int()'s digit limit) -> h11 refuses the request: 400,
    uvicorn's plain-text reason, the connection closed (the body's end is unknown); the log gets
    one warning line, no traceback."""
    with caplog.at_level(logging.WARNING):
        raw, _ = raw_exchange(url, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: "
                              + length + b"\r\n\r\n" + b'{"queries": ["a"]}')
    status, head, body = status_of(raw)
    assert (status, body) == (400, b"Invalid HTTP request received.")
    assert b"connection: close" in head.lower()
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("WARNING", "Invalid HTTP request received.", None)]


def chunked(body: bytes, piece: int = 1 << 16) -> bytes:
    """``body`` in HTTP/1.1 chunked transfer encoding, ``piece`` bytes a chunk."""
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + piece]), body[i:i + piece])
             for i in range(0, len(body), piece)]
    return b"".join(parts) + b"0\r\n\r\n"


def test_a_chunked_body_is_read_and_bounded_like_any_other(url: str):
    """Transfer-Encoding: chunked (no Content-Length) -> answered as usual; over 1 MiB of chunks
    -> 413, counted as the chunks arrive."""
    head = (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    status, _, body = status_of(raw_exchange(url, head + chunked(
        b'{"queries": ["Polish-Russian War director"], "topk": 1}', piece=7))[0])
    assert status == 200 and json.loads(body)["result"][0][0]["title"] == "Aleksander Ford"
    big = json.dumps({"queries": ["x" * (2 << 20)]}).encode()
    status, _, body = status_of(raw_exchange(url, head + chunked(big))[0])
    assert (status, json.loads(body)) == (413, {"detail": "request body over 1048576 bytes"})


def test_a_body_of_many_megabytes_gets_413_and_the_server_goes_on(url: str):
    """An 8 MB body (limit 1 MiB) -> the client reads a 413 naming the limit (the body is read and
    dropped, so no reset, even for urllib's Connection: close); the next request is answered."""
    big = json.dumps({"queries": ["x" * (8 << 20)]}).encode()
    assert post(f"{url}/retrieve", big) == (413, {"detail": "request body over 1048576 bytes"})
    assert post(f"{url}/retrieve", {"queries": ["Aleksander Ford"], "topk": 1})[0] == 200


def test_a_half_sent_body_gets_408_after_the_timeout_while_others_are_answered(strict_url: str):
    """A client that sends the headers and 10 of 1,000 body bytes, then stalls -> 408 after the
    server's 1 s request timeout and the connection closed; meanwhile another client is answered."""
    results: dict[str, Any] = {}

    def stalled() -> None:
        results["stalled"] = raw_exchange(strict_url, b"POST /retrieve HTTP/1.1\r\nHost: x\r\n"
                                          b"Content-Length: 1000\r\n\r\n" + b'{"queries"')

    thread = threading.Thread(target=stalled)
    thread.start()
    time.sleep(0.2)
    assert post(f"{strict_url}/retrieve", {"queries": ["Aleksander Ford"], "topk": 1})[0] == 200
    thread.join()
    raw, seconds = results["stalled"]
    status, head, body = status_of(raw)
    assert (status, json.loads(body)) == (
        408, {"detail": "the request body was not received within 1 s"})
    assert b"connection: close" in head.lower()
    assert seconds >= 0.9  # not before the timeout (load only makes it later)


def test_an_idle_kept_alive_connection_is_closed_after_the_timeout(strict_url: str):
    """After an answered request, a connection silent for the 1 s timeout is closed."""
    host, port = strict_url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.perf_counter()
        raw = b""
        while chunk := connection.recv(65536):  # the answer, then the server's close
            raw += chunk
            if raw.endswith(b"}"):
                started = time.perf_counter()
        assert status_of(raw)[0] == 200
        assert time.perf_counter() - started >= 0.9


def test_a_connection_silent_in_its_headers_stays_open_and_holds_no_one_back(strict_url: str):
    """Headers never finished (a slow client) -> no timeout applies before a request exists
    (uvicorn's h11 protocol has none): the connection stays open past the request timeout, and
    other clients are answered meanwhile (it holds no thread)."""
    host, port = strict_url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")
        assert post(f"{strict_url}/retrieve", {"queries": ["Aleksander Ford"], "topk": 1})[0] == 200
        connection.settimeout(2.0)  # twice the request timeout
        with pytest.raises(TimeoutError):
            connection.recv(1)


def test_the_server_refuses_bad_settings_naming_them(retriever: BM25Retriever):
    with pytest.raises(ValueError, match="request_timeout_s must be > 0, got 0"), running_server(
        retriever, request_timeout_s=0
    ):
        pass
    with pytest.raises(ValueError, match="default_topk must be >= 1, got 0"), running_server(
        retriever, default_topk=0
    ):
        pass


def test_the_load_benchmark_runs_and_reports_every_bad_request(tmp_path: Path):
    """Smoke test of benchmarks/serve_load.py at a tiny size (figures printed, never asserted):
    exit 0 means 0 errors under load and every bad request got its expected status."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_load.py"
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, str(script), "--clients", "1,4", "--requests", "200",
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [level["clients"] for level in report["levels"]] == [1, 4]
    assert all(level["requests"] == 200 and level["errors"] == 0 for level in report["levels"])
    assert {b["kind"]: b["status"] for b in report["bad_requests"]} == {
        "malformed JSON": 422, "queries as a string": 422, "huge topk": 422,
        "2,000 queries": 422, "8 MB body": 413, "half-sent body, stalled": 408,
        "Content-Length ²": 400, "chunked body (valid)": 200, "empty query list (valid)": 200}
    assert "factutil serve under load" in done.stdout
