"""An S3-compatible server on loopback for the tests: moto's server in its own process.

Stock moto checks a conditional PUT's precondition and then stores the object without holding a
lock, so two racing `If-None-Match: *` PUTs can both succeed. This wrapper serialises every
mutating request, so that a lost race in a test is ours, not the server's. Prints the port.

    python tests/s3_server.py [PORT]
"""

from __future__ import annotations

import sys
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

_WRITES = threading.Lock()


class SerialWrites:
    """WSGI middleware: one PUT/POST/DELETE at a time, reads in parallel."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with _WRITES:
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    app = SerialWrites(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
