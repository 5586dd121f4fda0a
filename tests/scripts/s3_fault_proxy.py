"""A faulty network in front of the test S3 server, on loopback: it answers a share of requests
with 503 SlowDown or 500 InternalError (without passing them on), drops some connections before
passing a request on, and drops some after the server has acted on it (the client never learns
that its PUT landed). Seeded, so a failing run can be replayed. With DROP_REPLY_SUFFIX, the
first PUT of a key ending so is passed on and its reply dropped (a targeted fault). Prints its port.

    python tests/scripts/s3_fault_proxy.py UPSTREAM_PORT FAULT_SHARE SEED [DROP_REPLY_SUFFIX]
"""

from __future__ import annotations

import http.client
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
FAULTS = ("slowdown", "error", "drop_before", "drop_after")


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = 0
    share = 0.0
    rng = random.Random(0)
    rng_lock = threading.Lock()
    counts: ClassVar[dict[str, int]] = {}
    drop_reply_suffix = ""  # the first PUT of a key ending so: passed on, its reply dropped

    def log_message(self, *args) -> None:  # quiet
        pass

    def _fault(self) -> str | None:
        with self.rng_lock:
            key = self.path.split("?")[0]
            if self.drop_reply_suffix and self.command == "PUT" and key.endswith(self.drop_reply_suffix):
                Proxy.drop_reply_suffix = ""
                return "drop_after"
            fault = self.rng.choice(FAULTS) if self.rng.random() < self.share else None
            key = fault or "passed"
            self.counts[key] = self.counts.get(key, 0) + 1
            return fault

    def _answer(self, status: int, code: str) -> None:
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>injected</Message></Error>"
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body.encode())

    def _body(self) -> bytes | None:
        """The request's body, de-chunked when sent with `Transfer-Encoding: chunked`."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _relay(self) -> None:
        body = self._body()
        fault = self._fault()
        if fault == "slowdown":
            return self._answer(503, "SlowDown")
        if fault == "error":
            return self._answer(500, "InternalError")
        if fault == "drop_before":
            self.close_connection = True
            return
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if fault == "drop_after":
            self.close_connection = True
            return
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


def main() -> None:
    Proxy.upstream, Proxy.share = int(sys.argv[1]), float(sys.argv[2])
    Proxy.rng = random.Random(int(sys.argv[3]))
    Proxy.drop_reply_suffix = sys.argv[4] if len(sys.argv) > 4 else ""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
