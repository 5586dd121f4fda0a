"""An S3-compatible server on loopback for the tests: moto's server in its own process.

Stock moto checks a conditional PUT's precondition and then stores the object without holding a
lock, so two racing `If-None-Match: *` PUTs can both succeed. This wrapper serialises every
mutating request, so that a lost race in a test is ours, not the server's. Prints the port.

    python tests/scripts/s3_server.py [PORT]
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

_WRITES = threading.Lock()


class SerialWrites:
    """WSGI middleware: one PUT/POST/DELETE at a time, reads in parallel. It also counts requests
    by kind for the benchmarks: `GET /__requests` answers the counts (JSON) and resets them."""

    def __init__(self, app):
        self.app = app
        self.counts: dict[str, int] = {}
        self.counts_lock = threading.Lock()

    def _kind(self, environ) -> str:
        method, query = environ.get("REQUEST_METHOD", ""), environ.get("QUERY_STRING", "")
        if method == "GET" and ("list-type" in query or "prefix=" in query or "delimiter" in query):
            return "LIST"
        return "POST(multipart)" if method == "POST" else method

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == "/__requests":
            with self.counts_lock:
                body, self.counts = json.dumps(self.counts).encode(), {}
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        with self.counts_lock:
            kind = self._kind(environ)
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with _WRITES:
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    app = SerialWrites(DomainDispatcherApplication(create_backend_app))
    logging.getLogger("werkzeug").setLevel(logging.INFO if os.environ.get("S3_SERVER_LOG") else logging.WARNING)
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
