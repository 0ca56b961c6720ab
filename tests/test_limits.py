"""Every limit of `serve`, against a real server started with small limits by flag.

For each limit: send the bad input, check the status and its one-line JSON error, and check that
the server still answers a good request right after. Slow bodies (slow loris) must get 408 or be
closed while other clients are served meanwhile; the rate limit refuses the 4th quick request of
one client with 429 + Retry-After, leaves other clients alone, and lets the first one in again.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest
from conftest import RunningHost, start_host, stop_host
from librarian import b64, make_library, unit_vectors, write_library

MAX_BODY = 4096
MAX_COUNT = 50
READ_TIMEOUT = 1.0
VECTORS = unit_vectors(6, dimension=8, seed=11)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    folder = tmp_path_factory.mktemp("limits") / "libraries"
    write_library(folder / "six.json", make_library(VECTORS))
    host = start_host(folder, "--max-body-bytes", str(MAX_BODY), "--max-count", str(MAX_COUNT),
                      "--body-read-timeout", str(READ_TIMEOUT))
    yield host
    stop_host(host)


@pytest.fixture(scope="module")
def rate_limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    folder = tmp_path_factory.mktemp("rate") / "libraries"
    write_library(folder / "six.json", make_library(VECTORS))
    # Legacy opaque tokens: each one's holder is a client of its own.
    holders = {name: {"token": f"rate-test-{name}"} for name in ("alice", "bob", "carol", "dave")}
    access = folder.parent / "access.SECRET.json"
    access.write_text(json.dumps({"tokens": holders}))
    access.chmod(0o600)
    # Slow enough to refill (one request every 2 s) that a busy machine's slow requests cannot refill it.
    host = start_host(folder, "--rate-limit", "0.5", "--rate-burst", "3", "--access", str(access))
    yield host
    stop_host(host)


def good_query(url: str, headers: dict[str, str] | None = None, row: int = 2, source: str = "127.0.0.1") -> httpx.Response:
    """A query; `source` is the loopback address it comes from (each address has a rate bucket of its own)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        return client.post(f"{url}/", json={"query_embedding": b64(VECTORS[row]), "count": 3, "count_type": "bit"},
                           headers=headers)


def assert_still_serving(url: str) -> None:
    response = good_query(url)
    assert response.status_code == 200, response.text
    bits = response.json()["bits"]
    assert len(bits) == 3 and bits[0]["info"]["url"] == "https://example.com/2"


def assert_one_line_error(response: httpx.Response, status: int, mentions: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0] == "application/json"
    assert b"\n" not in response.content.strip()
    body = json.loads(response.content)
    assert list(body) == ["error"] and isinstance(body["error"], str)
    assert mentions.lower() in body["error"].lower(), body["error"]
    assert 0 < len(body["error"]) < 300 and "Traceback" not in body["error"]


def json_body(size: int) -> bytes:
    """A syntactically fine JSON object of exactly `size` bytes."""
    head, tail = b'{"count":2,"pad":"', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def chunks(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def json_post(fields: dict) -> Callable[[str], httpx.Response]:
    return lambda url: httpx.post(f"{url}/", json=fields, timeout=10)


FORM = {"content-type": "application/x-www-form-urlencoded"}
BAD_INPUTS = [
    pytest.param(lambda url: httpx.post(f"{url}/", content=json_body(MAX_BODY + 1),
                                        headers={"content-type": "application/json"}),
                 413, "4,096-byte limit", id="body-over-limit-content-length"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=chunks(json_body(MAX_BODY + 1)),
                                        headers={"content-type": "application/json"}),
                 413, "4,096-byte limit", id="body-over-limit-chunked"),
    pytest.param(json_post({"count": MAX_COUNT + 1}), 400, f"count must be at most {MAX_COUNT}", id="count-over-max"),
    pytest.param(json_post({"count": 0}), 400, "count must be a positive integer", id="count-zero"),
    pytest.param(json_post({"query_embedding": b64(np.ones(5))}), 400, "query_embedding has 20 bytes",
                 id="dimension-mismatch"),
    pytest.param(json_post({"query_embedding": b64([np.nan] + [0.5] * 7)}), 400, "finite", id="nan-in-embedding"),
    pytest.param(json_post({"query_embedding": b64([0.5] * 7 + [np.inf])}), 400, "finite", id="inf-in-embedding"),
    pytest.param(json_post({"query_embedding": b64([np.inf] * 8, "<f8")}), 400, "finite", id="inf-in-float64"),
    pytest.param(json_post({"query_embedding": b64(np.full(8, 1e30))}), 400, "finite", id="huge-values"),
    # The largest base64 that fits in the body: it decodes to far more bytes than the model takes.
    pytest.param(json_post({"query_embedding": b64(np.ones(750))}), 400, "query_embedding has 3000 bytes",
                 id="oversized-base64"),
    pytest.param(json_post({"query_embedding": b64(np.ones(800))}), 413, "4,096-byte limit",
                 id="oversized-base64-over-body-limit"),
    pytest.param(json_post({"query_embedding": "AAAA!AAA"}), 400, "not valid base64", id="malformed-base64"),
    pytest.param(json_post({"query_embedding": base64.b64encode(b"\0" * 32).decode()[:-2]}), 400,
                 "not valid base64", id="truncated-base64"),
    pytest.param(lambda url: httpx.post(f"{url}/", data={f"field{n}": "1" for n in range(40)}), 400,
                 "too many fields", id="too-many-urlencoded-fields"),
    pytest.param(lambda url: httpx.post(f"{url}/", files={f"field{n}": (None, "1") for n in range(40)}), 400,
                 "too many fields", id="too-many-multipart-fields"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"count=2&omit=\xff", headers=FORM), 400,
                 "the form body is not UTF-8 text", id="form-not-utf-8"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"count=2&omit=%FF", headers=FORM), 400,
                 "not UTF-8 text once percent-decoded", id="form-percent-escape-not-utf-8"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b'--x\r\nContent-Disposition: form-data; name="omit"\r\n\r\n'
                                        b"\xff\r\n--x--\r\n", headers={"content-type": "multipart/form-data; boundary=x"}),
                 400, "the form body is not UTF-8 text", id="multipart-not-utf-8"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"[" * 3000, headers={"content-type": "application/json"}),
                 400, "nested too deeply", id="deep-json"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"count=2", headers={"content-type": "text/plain"}),
                 415, "unsupported content type 'text/plain'", id="unknown-content-type"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"\x82\xa5count\x02",
                                        headers={"content-type": "application/msgpack"}),
                 415, "unsupported content type", id="msgpack-body"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b'{"count": 2', headers={"content-type": "application/json"}),
                 400, "not valid JSON", id="broken-json"),
    pytest.param(lambda url: httpx.post(f"{url}/", content=b"[1, 2]", headers={"content-type": "application/json"}),
                 400, "must be an object", id="json-not-an-object"),
]


@pytest.mark.parametrize(("send", "status", "mentions"), BAD_INPUTS)
def test_bad_input_gets_its_status_and_one_json_line_and_the_server_goes_on(
    limited: RunningHost, send: Callable[[str], httpx.Response], status: int, mentions: str
) -> None:
    assert_one_line_error(send(limited.url), status, mentions)
    assert_still_serving(limited.url)


def test_a_body_just_at_the_limit_is_read(limited: RunningHost) -> None:
    response = httpx.post(f"{limited.url}/", content=json_body(MAX_BODY), headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


def test_without_a_count_the_default_is_capped_by_max_count(limited: RunningHost) -> None:
    """--max-count below the default count (1000) must not refuse queries that send no count."""
    response = httpx.post(f"{limited.url}/", json={"query_embedding": b64(VECTORS[0])})
    assert response.status_code == 200, response.text
    assert len(response.json()["bits"]) == 5  # 50 tokens at 10 a bit


# ---- slow loris -----------------------------------------------------------------------------------


def open_stalled_request(url: str, sent_body: bytes = b'{"count":', length: int = 100) -> socket.socket:
    """Headers and the start of a body, then nothing: what a slow-loris client does."""
    port = int(url.rsplit(":", 1)[1])
    stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
    stalled.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(length).encode() + b"\r\n\r\n" + sent_body)
    return stalled


def read_answer(stalled: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes (b'' means closed unanswered); neither within `timeout`
    fails the test: the server held the connection open."""
    stalled.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    try:
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            assert time.monotonic() < deadline, f"neither answered nor closed within {timeout:g} s: {received!r}"
            chunk = stalled.recv(4096)
            if not chunk:
                break
            received += chunk
    except TimeoutError:
        raise AssertionError(f"neither answered nor closed within {timeout:g} s: {received!r}") from None
    return received


def test_slow_loris_bodies_get_408_while_other_clients_are_served(limited: RunningHost) -> None:
    stalled = [open_stalled_request(limited.url, body) for body in (b'{"count":', b"", b'{"count": 2, "omit"') * 4]
    started = time.monotonic()
    served = 0
    while time.monotonic() - started < READ_TIMEOUT * 0.8 or not served:  # meanwhile, others are answered
        assert_still_serving(limited.url)
        served += 1

    # However busy the machine, every stalled body ends with a 408 (or its connection closed), and
    # not before the timer ran out.
    answers = [read_answer(connection, READ_TIMEOUT + 60) for connection in stalled]
    waited = time.monotonic() - started

    for answer in answers:
        # 408 with its JSON line, or (acceptable) the connection simply closed.
        if answer:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), answer
            assert json.loads(body) == {"error": f"the request body did not arrive within {READ_TIMEOUT:g} s"}
    assert waited > READ_TIMEOUT * 0.9
    for connection in stalled:
        connection.close()
    assert_still_serving(limited.url)


def test_a_slow_but_steady_body_is_not_cut_off(limited: RunningHost) -> None:
    """The timeout is between chunks, not for the whole body: a slow, live client gets its answer."""
    body = json.dumps({"query_embedding": b64(VECTORS[4]), "count": 2, "count_type": "bit"}).encode()
    connection = open_stalled_request(limited.url, b"", len(body))
    for start in range(0, len(body), len(body) // 4 + 1):
        time.sleep(READ_TIMEOUT * 0.4)
        connection.sendall(body[start:start + len(body) // 4 + 1])
    answer = read_answer(connection, 5)
    connection.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answer
    assert json.loads(payload)["bits"][0]["info"]["url"] == "https://example.com/4"


def test_stalled_headers_do_not_hold_up_other_clients(limited: RunningHost) -> None:
    port = int(limited.url.rsplit(":", 1)[1])
    half_headers = []
    for _ in range(20):
        connection = socket.create_connection(("127.0.0.1", port), timeout=5)
        connection.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        half_headers.append(connection)
    try:
        for _ in range(5):
            begin = time.monotonic()
            assert_still_serving(limited.url)
            assert time.monotonic() - begin < 0.5
    finally:
        for connection in half_headers:
            connection.close()


# ---- rate limiting --------------------------------------------------------------------------------


def test_the_fourth_quick_request_gets_429_others_pass_and_it_passes_after_waiting(rate_limited: RunningHost) -> None:
    alice = {"Authorization": "Bearer rate-test-alice"}
    bob = {"Authorization": "Bearer rate-test-bob"}

    first = [good_query(rate_limited.url, alice).status_code for _ in range(3)]
    refused = good_query(rate_limited.url, alice)
    other = good_query(rate_limited.url, bob)

    assert first == [200, 200, 200]
    assert_one_line_error(refused, 429, "too many requests")
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 2
    assert other.status_code == 200, "another client (another token) must not share the first one's bucket"
    assert httpx.get(f"{rate_limited.url}/healthz").status_code == 200  # probes are never limited

    time.sleep(retry_after)
    assert good_query(rate_limited.url, alice).status_code == 200


def test_a_client_without_a_token_is_limited_by_its_address(rate_limited: RunningHost) -> None:
    statuses = [good_query(rate_limited.url, source="127.0.0.2").status_code for _ in range(6)]
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses
    carol = {"Authorization": "Bearer rate-test-carol"}
    assert good_query(rate_limited.url, carol, source="127.0.0.2").status_code == 200


def test_made_up_tokens_do_not_escape_the_limit_of_their_address(rate_limited: RunningHost) -> None:
    statuses = [good_query(rate_limited.url, {"Authorization": f"Bearer made-up-{n}"}, source="127.0.0.3").status_code
                for n in range(6)]
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses


def test_a_burst_from_many_threads_is_cut_to_the_burst_size(rate_limited: RunningHost) -> None:
    headers = {"Authorization": "Bearer rate-test-dave"}
    statuses: list[int] = []
    lock = threading.Lock()

    def ask() -> None:
        status = good_query(rate_limited.url, headers).status_code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=ask) for _ in range(12)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    elapsed = time.monotonic() - started
    assert len(statuses) == 12 and set(statuses) <= {200, 429}
    # The burst of 3, plus what refilled (one every 2 s) while the 12 arrived.
    assert 3 <= statuses.count(200) <= 3 + int(elapsed * 0.5) + 1, (statuses, elapsed)


def test_refusals_are_in_the_access_log_as_json_lines(limited: RunningHost) -> None:
    """AccessLog: one JSON line per request on stdout, refusals included (never a header; credentials redacted)."""
    httpx.post(f"{limited.url}/?count=3", content=b"x", headers={"content-type": "text/csv",
                                                                  "authorization": "Bearer secret-in-a-header"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [json.loads(line) for line in limited.log().splitlines() if line.startswith("{")]
        if any(line["status"] == 415 for line in lines):
            break
        time.sleep(0.05)
    refused = [line for line in lines if line["status"] == 415]
    assert refused and refused[-1]["method"] == "POST" and refused[-1]["path"] == "/"
    assert set(refused[-1]) == {"time", "method", "path", "query", "status", "duration_ms", "generation", "client"}
    assert refused[-1]["query"] == "count=3"
    assert "secret-in-a-header" not in limited.log()
