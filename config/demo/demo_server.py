"""What the demo's servers share (python3's standard library only): listening on 127.0.0.1 (port 0
picks a free one), saying so in a ready file, and answering run.sh's readiness probe.

Readiness is the server's own word: it writes the port it listens on to the ready file (written
whole: a temporary name, then a rename) only once its socket listens, and over TLS once its
certificate is loaded. run.sh waits for that file, then probes `GET /ready`. A probe alone could be
answered by another process that already holds a fixed port; the file cannot."""
import http.server, json, os, signal, ssl, sys, threading

_log_lock = threading.Lock()


def log_line(record):
    """Writes RECORD as one JSON line on stderr (the server's log) with a single write, under a lock.
    The server answers requests on threads: print() writes the text and its newline separately, so
    two requests' lines could run together and leave an empty line, and run.sh reads the last line."""
    line = (json.dumps(record) + "\n").encode()
    with _log_lock:
        os.write(sys.stderr.fileno(), line)


class Handler(http.server.BaseHTTPRequestHandler):
    """Answers the readiness probe without logging it, so each server's log holds only the demo's
    requests (run.sh shows and checks their last lines)."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/ready":
            self.send_response(204); self.send_header("Content-Length", "0"); self.end_headers()
            return
        self.handle_get()

    def handle_get(self):
        self.answer(404, b"")

    def answer(self, status, body, content_type="application/json"):
        self.send_response(status); self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(name, handler, port, ready_file, certificate=None):
    """Listens on 127.0.0.1:PORT, writes the bound port to READY_FILE, serves until stopped (run.sh
    sends SIGTERM). A port that cannot be had ends the process with one line naming it (exit 1)."""
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as error:
        print(f"{name}: cannot listen on 127.0.0.1:{port}: {error.strerror}", file=sys.stderr, flush=True)
        sys.exit(1)
    if certificate:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    # run.sh stops the servers with SIGTERM: a caller that started the demo with it blocked (the
    # mask is inherited) would otherwise leave them running.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    temporary = ready_file + ".tmp"
    with open(temporary, "w") as out:
        out.write(f"{server.server_address[1]}\n")
    os.replace(temporary, ready_file)
    server.serve_forever()
