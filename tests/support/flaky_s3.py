"""A fault-injecting HTTP proxy in front of an S3 API server (moto), for retry tests.

Clients point their ``endpoint_url`` at the proxy. Requests are counted per HTTP method from 1 in
order of arrival, and every ``every[method]``-th one fails with an S3 error document; the faults
take turns through ``FAULTS``:

- 503 SlowDown, answered *before* the request reaches the server (throttling rejects the work);
- 500 InternalError, answered *after* the server handled the request: a PUT has stored its
  object, yet the client sees a failure, so its retry writes the same object again.

Everything else is forwarded unchanged, one upstream connection per request. The proxy listens
on 127.0.0.1 only, on a free port.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Fault:
    status: int
    code: str  # the S3 error code clients read to decide whether to retry
    after_forwarding: bool


FAULTS = (Fault(503, "SlowDown", after_forwarding=False), Fault(500, "InternalError", after_forwarding=True))
# hop-by-hop headers belong to one connection; the proxy sets its own length, date and server
_NOT_COPIED = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "expect", "content-length", "date", "server"}


def error_document(code: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>injected transient fault</Message><RequestId>flaky-proxy</RequestId></Error>").encode()


class FlakyS3Proxy:
    """``with FlakyS3Proxy(upstream, every={"PUT": 3}) as proxy: proxy.url``. ``seen`` counts the
    requests per method, ``injected`` the faults answered (by S3 error code and method)."""

    def __init__(self, upstream: str, every: Mapping[str, int]) -> None:
        if any(n < 2 for n in every.values()):
            raise ValueError("every[method] must be >= 2, or a request could never succeed")
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.every = dict(every)
        self.seen: Counter[str] = Counter()
        self.injected: Counter[tuple[str, str]] = Counter()
        self._faults = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="flaky-s3", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def injected_for(self, method: str) -> int:
        return sum(n for (_, m), n in self.injected.items() if m == method)

    def __enter__(self) -> FlakyS3Proxy:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _fault_for(self, method: str) -> Fault | None:
        """Counts the request; the fault to answer it with, if it is due to fail."""
        with self._lock:
            self.seen[method] += 1
            n = self.every.get(method)
            if not n or self.seen[method] % n:
                return None
            fault = FAULTS[self._faults % len(FAULTS)]
            self._faults += 1
            self.injected[(fault.code, method)] += 1
            return fault

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            if body or method in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive; the base class answers Expect: 100-continue

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
                pass

            def _body(self) -> bytes:
                """The whole request body (read even when the request fails, so the connection stays usable)."""
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                out = bytearray()
                while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
                    out += self.rfile.read(size)
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)

            def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                length = str(len(body))
                for k, v in headers:
                    if k.lower() == "content-length" and self.command == "HEAD":
                        length = v  # a HEAD answer states the size of an object it has no body of
                    elif k.lower() not in _NOT_COPIED:
                        self.send_header(k, v)
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self) -> None:
                body = self._body()
                fault = proxy._fault_for(self.command)
                if fault is None or fault.after_forwarding:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_COPIED}
                    answer = proxy._forward(self.command, self.path, headers, body)
                if fault is None:
                    self._reply(*answer)
                else:
                    self._reply(fault.status, [("Content-Type", "application/xml")], error_document(fault.code))

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler
