"""HTTP/1.1 framing over raw sockets against a real uvicorn server run as `engram serve` runs it: a request with
both Content-Length and Transfer-Encoding is refused and what was smuggled behind it is never answered; request
headers that arrive too slowly (or never) lose their connection; a bad branch name is a prompt 4xx."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable

import pytest

from .conftest import ThreadServer

Served = Callable[..., ThreadServer]

#: A request the server answers when it reads it (the smuggled one).
SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: smuggled\r\n\r\n"


def read_all(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started, data = time.monotonic(), b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


def statuses(data: bytes) -> list[int]:
    """The status codes of the responses in ``data``."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", data)]


def test_content_length_with_transfer_encoding_is_refused_and_the_smuggled_request_unanswered(
    served: Served,
) -> None:
    server = served()
    chunked = b"0\r\n\r\n"
    length = b"Content-Length: %d\r\n" % (len(chunked) + len(SMUGGLED))  # what a proxy would count as the body
    start = b"POST /store/items/search HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
    for framing in (length + b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: chunked\r\n" + length):
        order = start + framing + b"\r\n"
        with server.connect() as sock:
            sock.sendall(order + chunked + SMUGGLED)
            data, took = read_all(sock)  # the server closes the connection: read_all returns
        assert statuses(data) == [400], data  # one answer: the smuggled GET /healthz is never read
        head_out, _, body = data.partition(b"\r\n\r\n")
        assert b"connection: close" in head_out.lower()
        error = json.loads(body)["error"]
        assert error["code"] == "bad_request" and "Transfer-Encoding" in error["message"]
        assert took < 20


def test_the_same_request_without_ambiguity_is_served_and_keeps_its_connection(served: Served) -> None:
    server = served()
    body = b'{"namespace_prefix": ["a"]}'
    with server.connect() as sock:
        sock.sendall(
            b"POST /store/items/search HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body) + SMUGGLED
        )
        data = b""
        while statuses(data) != [200, 200]:  # both answered, in order, on one connection
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk


def test_half_sent_headers_lose_their_connection_within_the_header_timeout(served: Served) -> None:
    server = served(header_timeout=0.5)
    socks = [server.connect() for _ in range(20)]
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: ")  # and nothing more
        for sock in socks:
            data, took = read_all(sock)
            assert statuses(data) == [408], data
            assert took < 15  # 0.5 s plus a loaded machine's slack
    finally:
        for sock in socks:
            sock.close()


def test_trickled_headers_do_not_extend_the_deadline(served: Served) -> None:
    server = served(header_timeout=1.0)
    with server.connect() as sock:
        started = time.monotonic()
        closed = False
        for byte in b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: " + b"a" * 400:
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server has closed the connection
                closed = True
                break
            time.sleep(0.05)
            if time.monotonic() - started > 20:
                break
        if not closed:
            data, _ = read_all(sock)
            assert statuses(data) == [408], data
        assert time.monotonic() - started < 20  # a byte every 50 ms would take over 20 s to send


def test_a_connection_that_sends_nothing_is_closed(served: Served) -> None:
    server = served(header_timeout=0.5)
    with server.connect() as sock:
        data, took = read_all(sock)
    assert data == b"" and took < 15


@pytest.mark.parametrize("pause", [0.0, 1.5])
def test_keep_alive_requests_are_not_cut_by_the_header_deadline(served: Served, pause: float) -> None:
    server = served(header_timeout=1.0)
    with server.connect() as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            data = b""
            while statuses(data) != [200] or not data.endswith(b"}"):
                chunk = sock.recv(65536)
                assert chunk, data
                data += chunk
            time.sleep(pause)  # idle longer than the header timeout, shorter than keep-alive (5 s)


@pytest.mark.parametrize("name", ["x\n", "x\r\nSet-Cookie: a=b", "main\u202e", "abcdef0"])
def test_a_bad_branch_name_over_http_is_a_prompt_4xx(served: Served, name: str) -> None:
    server = served()
    body = json.dumps({"name": name}).encode()
    with server.connect() as sock:
        sock.settimeout(20)
        sock.sendall(
            b"POST /v1/branches HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        data, took = read_all(sock)
    assert statuses(data) == [422], data
    assert json.loads(data.partition(b"\r\n\r\n")[2])["error"]["code"] == "invalid_ref"
    assert took < 15
