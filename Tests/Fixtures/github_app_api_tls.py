#!/usr/bin/env python3
"""github_app_api.py over TLS, as GitHub (and a GitHub Enterprise Server) is reached: the same
endpoints, the same log, on https://127.0.0.1:PORT with the given certificate.

    github_app_api_tls.py CERT KEY <github_app_api.py arguments>

The listening socket is wrapped with the certificate before serving; everything else is the plain
fixture, run unchanged (its docstring describes the endpoints and the log).
"""

import http.server
import os
import runpy
import ssl
import sys

cert, key = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0]] + sys.argv[3:]

context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)


class TLSServer(http.server.ThreadingHTTPServer):
    def server_bind(self):
        super().server_bind()
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def handle_error(self, request, client_address):
        pass  # a refused handshake (the proxy rejecting the certificate) is part of the tests


http.server.ThreadingHTTPServer = TLSServer
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "github_app_api.py"), run_name="__main__")
