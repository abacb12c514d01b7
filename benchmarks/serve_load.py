"""`factutil serve` under load, on loopback, with bad requests sent while the load runs.

    python benchmarks/serve_load.py [--clients 1,16,64] [--requests 4000] [--queries 1]
                                    [--topk 3] [--request-timeout 1] [--max-seconds 120]
                                    [--client-timeout 30] [--json FILE]

Starts ``python -m factutil serve --port 0`` (BM25 over the bundled 2Wiki paragraphs, Search-R1's
``POST /retrieve``) as a separate process, on 127.0.0.1 only. For each number of concurrent
clients, ``--requests`` requests are shared among that many threads, each holding one keep-alive
connection; every request is ``--queries`` real search queries of the bundled sample rollouts
(``examples/data/2wiki_rollouts.jsonl``, cycled), ``topk`` passages each with scores. Reported per
level: requests done, errors (any answer but a well-formed 200, or a failed connection), latency
p50 / p99 / max in milliseconds, throughput in requests per second, wall time. Every level stops
at ``--max-seconds`` (between requests); every request has a ``--client-timeout``.

While the largest level runs, one more client asks ``GET /health`` every 0.2 s on its own
connection (latency p50 and max: a health check must answer within 1 s whatever the load), and
one more sends each bad request once, in order, and
records the status and the seconds to the answer: malformed JSON, ``queries`` as a string, a
huge ``topk``, too many queries, a body of 8 MB, a body cut short and stalled (answered after the
server's ``--request-timeout``), a ``Content-Length`` of "²" and, valid, a chunked body (no
``Content-Length``) and an empty query list.
The command exits 1 when a level has an error, a bad request gets another status than expected,
or /health took over 1 s.

Prints two tables; ``--json`` writes the figures. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "data" / "2wiki_rollouts.jsonl"
CLIENT_TIMEOUT_S = 30.0


def sample_queries() -> list[str]:
    """The distinct search queries of the bundled sample rollouts, in file order."""
    queries: dict[str, None] = {}
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        for action in json.loads(line)["actions"]:
            if action.get("action") == "search":
                queries.setdefault(action["query"], None)
    return list(queries)


def start_server(topk: int, request_timeout: float) -> tuple[subprocess.Popen, int]:
    """``factutil serve --port 0`` in a child process; returns it and the port it bound."""
    process = subprocess.Popen(
        [sys.executable, "-m", "factutil", "serve", "--port", "0", "--topk", str(topk),
         "--request-timeout", str(request_timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = process.stdout.readline()
    if not line.startswith("listening on http://"):
        process.kill()
        raise SystemExit(f"factutil serve did not start: {line!r} {process.stderr.read()[-2000:]}")
    return process, int(line.split()[2].rsplit(":", 1)[1].split("/", 1)[0])


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (share in (0, 1]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(-(-share * len(ordered) // 1)) - 1))]


def run_level(port: int, clients: int, requests: int, queries: list[str], topk: int,
              max_seconds: float, during=None, per_request: int = 1) -> dict:
    """``requests`` requests by ``clients`` threads with keep-alive connections; ``during`` (a
    callable) runs in its own thread while they do."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.perf_counter() + max_seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
        while time.perf_counter() < deadline:
            with lock:
                index = next(counter, None)
            if index is None:
                break
            asked = [queries[(index * per_request + k) % len(queries)] for k in range(per_request)]
            body = json.dumps({"queries": asked, "topk": topk, "return_scores": True}).encode()
            started = time.perf_counter()
            try:
                connection.request("POST", "/retrieve", body,
                                   {"Content-Type": "application/json"})
                response = connection.getresponse()
                payload = json.loads(response.read())
                ok = response.status == 200 and len(payload["result"]) == per_request and all(
                    len(hits) == topk for hits in payload["result"])
                problem = None if ok else f"HTTP {response.status}"
            except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
                problem = f"{type(error).__name__}: {error}"
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port,
                                                        timeout=CLIENT_TIMEOUT_S)
            seconds = time.perf_counter() - started
            with lock:
                latencies.append(seconds)
                if problem is not None:
                    errors.append(problem)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    extra = threading.Thread(target=during) if during is not None else None
    started = time.perf_counter()
    if extra is not None:
        extra.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if extra is not None:
        extra.join()
    return {
        "clients": clients, "requests": len(latencies), "errors": len(errors),
        "error_examples": sorted(set(errors))[:5],
        "p50_ms": 1000 * percentile(latencies, 0.50) if latencies else None,
        "p99_ms": 1000 * percentile(latencies, 0.99) if latencies else None,
        "max_ms": 1000 * max(latencies) if latencies else None,
        "throughput_rps": len(latencies) / wall if wall else 0.0, "wall_s": wall,
        "started": started, "ended": started + wall,
    }


def _post(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def bad_requests(topk: int) -> list[tuple[str, bytes, int]]:
    """(kind, raw HTTP request, expected status) of each bad request, and one valid edge case."""
    def with_body(body: bytes) -> bytes:
        return _post("/retrieve", body, {"Content-Type": "application/json",
                                          "Content-Length": str(len(body))})

    big = json.dumps({"queries": ["x" * (8 << 20)]}).encode()
    return [
        ("malformed JSON", with_body(b'{"queries": ["a",'), 422),
        ("queries as a string", with_body(b'{"queries": "capital of France"}'), 422),
        ("huge topk", with_body(json.dumps({"queries": ["a"], "topk": 10**9}).encode()), 422),
        ("2,000 queries", with_body(json.dumps({"queries": ["a"] * 2000}).encode()), 422),
        ("8 MB body", with_body(big), 413),
        ("half-sent body, stalled", _post("/retrieve", b'{"queries": ["a', {
            "Content-Length": "1000"}), 408),
        ("Content-Length ²", _post("/retrieve", b"{}", {"Content-Length": "\u00b2"}), 400),
        ("chunked body (valid)", _post("/retrieve", b"f\r\n{\"queries\": []}\r\n0\r\n\r\n", {
            "Content-Type": "application/json", "Transfer-Encoding": "chunked"}), 200),
        ("empty query list (valid)", with_body(b'{"queries": []}'), 200),
    ]


def send_raw(port: int, request: bytes) -> tuple[int | None, float, str]:
    """Send one raw request on a fresh connection; (status or None, seconds, first error line)."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S) as sock:
            sock.sendall(request)
            reply = b""
            while b"\r\n\r\n" not in reply and (chunk := sock.recv(65536)):
                reply += chunk
            head, _, body = reply.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            # without a Content-Length (h11's plain-text 400) the body ends when the server closes
            while (length is None or len(body) < length) and (chunk := sock.recv(65536)):
                body += chunk
        status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else None
        try:
            message = str(json.loads(body).get("detail", "(a result)"))
        except (ValueError, AttributeError):
            message = body.decode("utf-8", "replace")
        message = message if len(message) <= 48 else message[:45] + "..."
    except OSError as error:
        status, message = None, f"{type(error).__name__}: {error}"
    return status, time.perf_counter() - started, message


def probe_health(port: int, until: threading.Event, every_s: float = 0.2) -> list[float]:
    """Seconds of each ``GET /health`` asked every ``every_s`` until ``until`` is set (a failed
    one counts as the client timeout)."""
    seconds: list[float] = []
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
    while not until.wait(every_s):
        started = time.perf_counter()
        try:
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            seconds.append(time.perf_counter() - started if response.status == 200
                           else CLIENT_TIMEOUT_S)
        except (OSError, http.client.HTTPException):
            seconds.append(CLIENT_TIMEOUT_S)
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
    connection.close()
    return seconds


def main() -> None:
    """Run the levels, then print and optionally write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--requests", type=int, default=4000, help="requests per level")
    parser.add_argument("--queries", type=int, default=1, help="queries per request")
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--request-timeout", type=float, default=1.0,
                        help="the server's --request-timeout (the stalled body's wait)")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="cap per level")
    parser.add_argument("--client-timeout", type=float, default=30.0,
                        help="seconds a client waits for an answer")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    global CLIENT_TIMEOUT_S
    CLIENT_TIMEOUT_S = args.client_timeout
    levels = [int(c) for c in args.clients.split(",")]
    queries = sample_queries()
    process, port = start_server(args.topk, args.request_timeout)
    bad: list[dict] = []
    health: list[float] = []
    stop_probe = threading.Event()

    def abuse() -> None:
        time.sleep(0.2)  # the load is running

        def one(kind: str, request: bytes, expected: int) -> None:
            sent = time.perf_counter()
            status, seconds, message = send_raw(port, request)
            bad.append({"kind": kind, "status": status, "expected": expected, "seconds": seconds,
                        "answer": message, "sent": sent, "answered": sent + seconds})

        threads = [threading.Thread(target=one, args=case) for case in bad_requests(args.topk)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        order = [kind for kind, _, _ in bad_requests(args.topk)]
        bad.sort(key=lambda b: order.index(b["kind"]))

    results = []
    try:
        run_level(port, 4, 40, queries, args.topk, args.max_seconds)  # warm-up, not reported
        for clients in levels:
            largest = clients == max(levels)
            probe = threading.Thread(target=lambda: health.extend(probe_health(port, stop_probe)))
            if largest:
                probe.start()
            results.append(run_level(port, clients, args.requests, queries, args.topk,
                                     args.max_seconds, abuse if largest else None, args.queries))
            if largest:
                stop_probe.set()  # the probe ends with the level it watched
                probe.join()
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()

    console = Console(width=max(Console().width, 110))
    table = Table(title=f"factutil serve under load: {args.requests} requests per level, "
                        f"{args.queries} queries each, topk {args.topk}, keep-alive, 127.0.0.1",
                  header_style="bold")
    for column in ("clients", "requests", "errors", "p50 ms", "p99 ms", "max ms", "req/s",
                   "wall s"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(str(r["clients"]), str(r["requests"]), str(r["errors"]),
                      f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}", f"{r['max_ms']:.1f}",
                      f"{r['throughput_rps']:.0f}", f"{r['wall_s']:.2f}")
    console.print(table)
    bad_table = Table(title=f"bad requests during the {max(levels)}-client level "
                            f"(server --request-timeout {args.request_timeout:g})",
                      header_style="bold")
    for column in ("request", "status", "expected", "seconds", "in the load", "answer"):
        bad_table.add_column(column, justify="left" if column in ("request", "answer") else "right")
    loaded = results[-1] if results else {"started": 0.0, "ended": 0.0}
    for b in bad:
        b["during_load"] = loaded["started"] <= b["sent"] and b["answered"] <= loaded["ended"]
        bad_table.add_row(b["kind"], str(b["status"]), str(b["expected"]), f"{b['seconds']:.2f}",
                          "yes" if b["during_load"] else "no", b["answer"].replace("[", "\\["))
    console.print(bad_table)
    if health:
        console.print(f"GET /health during the {max(levels)}-client level: {len(health)} asked, "
                      f"p50 {1000 * percentile(health, 0.5):.1f} ms, max "
                      f"{1000 * max(health):.1f} ms, {sum(h > 1.0 for h in health)} over 1 s")
    failed = [r for r in results if r["errors"]] + [b for b in bad if b["status"] != b["expected"]]
    failed += [h for h in health if h > 1.0]
    for r in results:
        for example in r["error_examples"]:
            console.print(f"{r['clients']} clients: {example}", markup=False)
    if args.json:
        args.json.write_text(json.dumps({
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()},
            "settings": vars(args) | {"json": str(args.json)}, "levels": results,
            "bad_requests": bad, "health_s": health}, indent=2))
        console.print(f"wrote {args.json}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
