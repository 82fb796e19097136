"""An HTTP proxy on 127.0.0.1 that breaks chosen requests on their way to a real server.

Tests put it in front of moto_server or an mlflow server and point the pipeline at the proxy's
URL, so the faults happen on a real TCP connection, below boto3 and MLflow's HTTP clients:

- ``reset_before_headers``: the connection is reset (RST, via ``SO_LINGER`` 0) before any byte
  of the answer; the request never reaches the server.
- ``reset_after_headers``: status line and headers, then a reset.
- ``truncate_body``: the real headers, ``Content-Length`` included, then half the body and a
  plain close, as when a connection drops mid-download.
- ``corrupt_body``: the real headers and a body of the same length with one byte changed.
- ``delay``: the answer, ``seconds`` late.
- ``stall``: the request is held and never forwarded; ``stall_after_forward``: the server
  handles it, and its answer is held. Held connections are reset on :meth:`FaultProxy.release`
  or when the proxy closes. :meth:`FaultProxy.wait_for_stall` tells when one is held, so that a
  test can kill its client at exactly that point.
- ``hold``: the request is held until :meth:`FaultProxy.release`, then forwarded as it was: it
  reaches the server late, after whatever the test did meanwhile.
- ``barrier``: the first ``times`` matching requests are held until all of them have arrived,
  then forwarded together, and their answers held until the server has answered all of them:
  clients racing for the same thing all read the server's state before any of them can change
  it. (Released at once, a client whose forward lagged on a loaded machine read what a faster
  one had already created, and the race did not happen.)

A rule matches a method and a regular expression searched in the request path, for its first
``times`` matching requests (every one when ``times`` is None); rules are tried in the order
added. Every request is recorded with the fault it got, so tests count attempts at the wire.
Each request is forwarded on a fresh upstream connection and its answer read whole, which is
enough for the small objects and API calls tests send.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import urlsplit

FAULTS = ("reset_before_headers", "reset_after_headers", "truncate_body", "corrupt_body",
          "delay", "stall", "stall_after_forward", "hold", "barrier")
BARRIER_TIMEOUT_SECONDS = 300
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
               "trailer", "upgrade", "proxy-authenticate", "proxy-authorization"}
UPSTREAM_TIMEOUT_SECONDS = 120


@dataclass
class Rule:
    fault: str
    path: re.Pattern
    method: str | None = None
    times: int | None = None
    seconds: float = 0.0
    hits: int = 0
    barrier: threading.Barrier | None = None  # all requests arrived
    answered: threading.Barrier | None = None  # all answers in from the server

    def takes(self, method: str, path: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        if not self.path.search(path):
            return False
        return self.times is None or self.hits < self.times


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    fault: str | None


@dataclass
class _Request:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    close_after: bool = field(default=False)


class _ClientGone(Exception):
    pass


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:5000") as proxy: ... proxy.url ...``"""

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self._clients: set[socket.socket] = set()
        self._released = threading.Event()
        self._stalled = threading.Condition(self._lock)
        self._stalls = 0
        self._closing = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name="fault-proxy-accept")
        self._acceptor.start()

    # --- what tests call ---------------------------------------------------------------------

    def add(self, fault: str, path: str, *, method: str | None = None, times: int | None = None,
            seconds: float = 0.0) -> Rule:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
        if fault == "barrier" and not times:
            raise ValueError("a barrier needs times: how many requests it gathers")
        barriers = {"barrier": threading.Barrier(times), "answered": threading.Barrier(times)} \
            if fault == "barrier" else {}
        rule = Rule(fault, re.compile(path), method, times, seconds, **barriers)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """No more faults: every later request passes through."""
        with self._lock:
            self._rules.clear()

    def seen(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        pattern = re.compile(path) if path else None
        with self._lock:
            return [s for s in self._seen if (method is None or s.method == method)
                    and (pattern is None or pattern.search(s.path))]

    def wait_for_stall(self, timeout: float) -> bool:
        """Whether a request is being held (stall or hold) within ``timeout`` seconds."""
        with self._stalled:
            return self._stalled.wait_for(lambda: self._stalls > 0, timeout)

    def release(self) -> None:
        """Let every held request go (a stalled one is reset, a held one forwarded); later
        ones are held again until the next release."""
        self._released.set()
        time.sleep(0.1)
        self._released.clear()

    def close(self) -> None:
        self._closing = True
        self._released.set()
        with self._lock:
            for rule in self._rules:
                for barrier in (rule.barrier, rule.answered):
                    if barrier is not None:
                        barrier.abort()
        self._listener.close()
        self._acceptor.join(5)
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            _reset(client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the proxy ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._clients.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True,
                             name="fault-proxy-conn").start()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while not self._closing:
                request = _read_request(reader, client)
                if request is None:
                    break
                if not self._handle(client, request) or request.close_after:
                    break
        except (_ClientGone, OSError):
            pass
        finally:
            reader.close()
            with self._lock:
                self._clients.discard(client)
            try:
                client.close()
            except OSError:
                pass

    def _rule_for(self, request: _Request) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.takes(request.method, request.path):
                    rule.hits += 1
                    chosen = rule
                    break
            else:
                chosen = None
            self._seen.append(Seen(request.method, request.path,
                                   chosen.fault if chosen else None))
        return chosen

    def _handle(self, client: socket.socket, request: _Request) -> bool:
        """Answer one request; False when the connection was ended by a fault."""
        rule = self._rule_for(request)
        fault = rule.fault if rule else None
        if fault == "reset_before_headers":
            _reset(client)
            return False
        if fault == "stall":
            self._hold()
            _reset(client)
            return False
        if fault == "hold":
            self._hold()
        if fault == "barrier":
            _gather(rule.barrier)
        status, reason, headers, body = self._forward(request)
        if fault == "barrier":
            _gather(rule.answered)
        if fault == "stall_after_forward":
            self._hold()
            _reset(client)
            return False
        if fault == "delay":
            time.sleep(rule.seconds)
        if fault == "corrupt_body" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1:]
        head = _response_head(request.method, status, reason, headers, len(body))
        client.sendall(head)
        if fault == "reset_after_headers":
            _reset(client)
            return False
        if fault == "truncate_body":
            client.sendall(body[:len(body) // 2])
            client.shutdown(socket.SHUT_WR)
            return False
        if request.method != "HEAD":
            client.sendall(body)
        return True

    def _hold(self) -> None:
        with self._stalled:
            self._stalls += 1
            self._stalled.notify_all()
        self._released.wait()
        with self._stalled:
            self._stalls -= 1

    def _forward(self, request: _Request):
        connection = http.client.HTTPConnection(*self._upstream,
                                                timeout=UPSTREAM_TIMEOUT_SECONDS)
        try:
            headers = {name: value for name, value in request.headers
                       if name.lower() not in _HOP_BY_HOP}
            if request.body or request.method in ("POST", "PUT", "PATCH"):
                headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
                headers["Content-Length"] = str(len(request.body))
            connection.request(request.method, request.path, body=request.body or None,
                               headers=headers)
            response = connection.getresponse()
            body = response.read()
            return response.status, response.reason, response.getheaders(), body
        finally:
            connection.close()


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the peer sees 'connection reset by peer'."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


def _read_line(reader) -> bytes:
    line = reader.readline(65537)
    if len(line) > 65536:
        raise _ClientGone("header line too long")
    return line


def _read_request(reader, client: socket.socket) -> _Request | None:
    line = _read_line(reader)
    while line in (b"\r\n", b"\n"):
        line = _read_line(reader)
    if not line:
        return None
    method, path, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    headers: list[tuple[str, str]] = []
    while True:
        line = _read_line(reader)
        if not line:
            raise _ClientGone("closed inside the headers")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    lower = {name.lower(): value for name, value in headers}
    if lower.get("expect", "").lower() == "100-continue":
        # botocore waits for this before sending a PUT's body.
        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        headers = [(n, v) for n, v in headers if n.lower() != "expect"]
    if "chunked" in lower.get("transfer-encoding", "").lower():
        body = _read_chunked(reader)
    else:
        length = int(lower.get("content-length", "0") or 0)
        body = reader.read(length) if length else b""
        if len(body) != length:
            raise _ClientGone("closed inside the body")
    close_after = lower.get("connection", "").lower() == "close"
    return _Request(method, path, headers, body, close_after)


def _read_chunked(reader) -> bytes:
    chunks = []
    while True:
        size_line = _read_line(reader)
        if not size_line:
            raise _ClientGone("closed inside a chunked body")
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while _read_line(reader) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        chunks.append(reader.read(size))
        reader.read(2)


def _response_head(method: str, status: int, reason: str, headers, body_length: int) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in headers:
        lowered = name.lower()
        if lowered in _HOP_BY_HOP:
            continue
        # A HEAD answer keeps the object's length; other answers carry the body read here.
        if lowered == "content-length" and method != "HEAD":
            continue
        lines.append(f"{name}: {value}")
    if method != "HEAD":
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _gather(barrier: threading.Barrier) -> None:
    try:
        barrier.wait(BARRIER_TIMEOUT_SECONDS)
    except threading.BrokenBarrierError:
        pass  # not all came: let the ones that did go on, and the test tell
