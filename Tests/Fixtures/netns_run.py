#!/usr/bin/env python3
"""Runs a test inside a network (and mount) namespace of its own, built from a JSON spec, and prints
one JSON report on stdout. Needs root (it is `unshare -n -m`); without root, or without a tool the
spec needs, it prints {"skipped": REASON} and exits 0, so the caller can say why it skipped.

The spec (every key optional):
  addresses:   ["10.77.0.1/32", "fd00::1/128"]          added to `lo` (which is brought up)
  hosts:       {"api.example": "10.77.0.1"}              bind-mounted over /etc/hosts (with localhost)
  resolv_conf: "nameserver 10.77.0.53\\n"                bind-mounted over /etc/resolv.conf
  nft:         "table ip nat { ... }"                     loaded with `nft -f -`
  iptables:    [["-t", "nat", "-A", "OUTPUT", ...]]       each run as `iptables ARGS`
  ip6tables:   [[...]]                                    each run as `ip6tables ARGS`
  origins:     [{"name": "a80", "listen": "10.77.0.1:80", "tls": {"cert": P, "key": P}}]
               HTTP/1.1 origins in this process: each answers any method with JSON
               {"origin": NAME, "path": ..., "headers": {...}}, and the report lists what each received
               (method, path, headers, body, and the peer address:port it came from)
  dns:         [{"listen": "10.77.0.53:53", "answers": {"name.example": ["10.77.0.1"]}}]
               a UDP DNS server answering A/AAAA from `answers` (NXDOMAIN otherwise), for rebinding tests;
               the report lists every name it was asked (`dns_queries`)
  background:  [{"name": "proxy", "argv": [...], "env": {...}, "ready": "listening on"}]
               started in order; each waited for until a stderr line contains `ready` (if given)
  commands:    [{"name": "c1", "argv": [...], "uid": 65534, "timeout": 20, "env": {...}}]
               run in order after everything is up; `uid` runs it with setpriv as that user and group
               (no supplementary groups); the environment is only PATH plus `env` (no proxy variables)
Report: {"commands": [{"name", "rc", "stdout", "stderr"}], "origins": {NAME: [requests]},
         "background": [{"name", "rc", "stderr"}], "dns_queries": [NAME]}; "error": TEXT when the namespace could not be built.

Ports inside the namespace are fixed by the spec: the namespace is new and empty, so nothing else
can hold them (the port-0 rule of docs/testing.md is about the shared host namespace).
"""
import json, os, shutil, socket, socketserver, ssl, struct, subprocess, sys, tempfile, threading, time
import http.server

from dns_wire import read_question, reply

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def needed_tools(spec):
    tools = ["unshare", "ip", "mount"]
    if spec.get("nft"):
        tools.append("nft")
    if spec.get("iptables"):
        tools.append("iptables")
    if spec.get("ip6tables"):
        tools.append("ip6tables")
    if any("uid" in command for command in spec.get("commands", [])):
        tools.append("setpriv")
    return tools


def outside(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    if os.geteuid() != 0:
        print(json.dumps({"skipped": "not root: a network namespace with nftables needs root"}))
        return 0
    missing = [tool for tool in needed_tools(spec) if shutil.which(tool, path=PATH) is None]
    if missing:
        print(json.dumps({"skipped": "missing: " + ", ".join(missing) + " (make test-deps installs them)"}))
        return 0
    unshare = shutil.which("unshare", path=PATH)
    # A private mount namespace: the bind mounts of /etc/hosts and /etc/resolv.conf stay in it.
    result = subprocess.run(
        [unshare, "--net", "--mount", "--propagation", "private", sys.executable, os.path.abspath(__file__), "--inside", spec_path],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        print(json.dumps({"error": "the namespace run failed (exit %d): %s" % (result.returncode, result.stderr[-2000:])}))
        return 0
    sys.stdout.write(result.stdout)
    return 0


def run(argv, **kwargs):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": PATH}, **kwargs)
    if result.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), result.returncode, result.stderr.strip()))
    return result


def split_listen(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class Origin:
    """One HTTP/1.1 origin (TLS when given a certificate), recording what it received."""

    def __init__(self, spec):
        self.name = spec["name"]
        self.requests = []
        lock = threading.Lock()
        name, requests = self.name, self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                record = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body.decode("latin-1"),
                          "peer": "%s:%d" % self.client_address[:2]}
                with lock:
                    requests.append(record)
                out = json.dumps({"origin": name, "path": self.path, "headers": record["headers"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer

            def log_message(self, *args):
                pass

        host, port = split_listen(spec["listen"])

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

        self.server = Server((host, port), Handler)
        if spec.get("tls"):
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(spec["tls"]["cert"], spec["tls"]["key"])
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class DNSServer:
    """A UDP DNS server answering A and AAAA questions from a fixed table (RFC 1035 §4)."""

    def __init__(self, spec):
        host, port = split_listen(spec["listen"])
        answers = {name.lower().rstrip("."): addresses for name, addresses in spec.get("answers", {}).items()}
        # Every name asked, answered or not: what a resolver was made to send out is the test.
        self.queries = queries = []

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                data, sock = self.request
                question = read_question(data)
                if question is None:
                    return
                ident, flags, name, qtype, raw = question
                queries.append(name)
                sock.sendto(reply(ident, flags, raw, qtype, answers.get(name)), self.client_address)

        class Server(socketserver.ThreadingUDPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

        self.server = Server((host, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Background:
    def __init__(self, spec):
        self.name = spec["name"]
        env = {"PATH": PATH}
        env.update(spec.get("env", {}))
        self.process = subprocess.Popen(spec["argv"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.ready = threading.Event()
        marker = spec.get("ready")
        if marker is None:
            self.ready.set()

        def read():
            for line in self.process.stderr:
                self.lines.append(line)
                if marker is not None and marker in line:
                    self.ready.set()
            self.ready.set()  # it ended: waiting longer is pointless

        threading.Thread(target=read, daemon=True).start()
        if not self.ready.wait(spec.get("timeout", 30)) or self.process.poll() is not None:
            raise RuntimeError("%s did not become ready: %s" % (self.name, "".join(self.lines)[-2000:]))

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return {"name": self.name, "rc": self.process.returncode, "stderr": "".join(self.lines)}


def bind_file(content, target, keep):
    handle = tempfile.NamedTemporaryFile("w", delete=False, prefix="netns-", suffix=os.path.basename(target))
    handle.write(content)
    handle.close()
    os.chmod(handle.name, 0o644)
    keep.append(handle.name)
    run(["mount", "--bind", handle.name, target])


def inside(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    report = {"commands": [], "origins": {}, "background": [], "dns_queries": []}
    started, origins, servers, temporary = [], [], [], []
    try:
        run(["ip", "link", "set", "lo", "up"])
        for address in spec.get("addresses", []):
            run(["ip", "-6" if ":" in address else "-4", "addr", "add", address, "dev", "lo"] + (["nodad"] if ":" in address else []))
        if "hosts" in spec:
            lines = ["127.0.0.1 localhost", "::1 localhost"] + ["%s %s" % (address, name) for name, address in spec["hosts"].items()]
            bind_file("\n".join(lines) + "\n", "/etc/hosts", temporary)
        if "resolv_conf" in spec:
            bind_file(spec["resolv_conf"], "/etc/resolv.conf", temporary)
        if spec.get("nft"):
            run(["nft", "-f", "-"], input=spec["nft"])
        for argv in spec.get("iptables", []):
            run(["iptables"] + argv)
        for argv in spec.get("ip6tables", []):
            run(["ip6tables"] + argv)
        for entry in spec.get("dns", []):
            servers.append(DNSServer(entry))
        for entry in spec.get("origins", []):
            origins.append(Origin(entry))
        for entry in spec.get("background", []):
            started.append(Background(entry))
        for command in spec.get("commands", []):
            argv = command["argv"]
            if "uid" in command:
                uid = str(command["uid"])
                argv = ["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups"] + argv
            env = {"PATH": PATH}
            env.update(command.get("env", {}))
            try:
                result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=command.get("timeout", 30))
                report["commands"].append({"name": command.get("name", argv[0]), "rc": result.returncode, "stdout": result.stdout, "stderr": result.stderr})
            except subprocess.TimeoutExpired as expired:
                report["commands"].append({"name": command.get("name", argv[0]), "rc": -1, "stdout": expired.stdout or "", "stderr": "timed out"})
    except Exception as error:  # the report says what failed; the caller's assertions show it
        report["error"] = str(error)
    finally:
        for background in reversed(started):
            report["background"].append(background.stop())
        for origin in origins:
            origin.stop()
            report["origins"][origin.name] = origin.requests
        for server in servers:
            server.stop()
            report["dns_queries"] += server.queries
        for path in temporary:
            try:
                os.unlink(path)
            except OSError:
                pass
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--inside":
        sys.exit(inside(sys.argv[2]))
    if len(sys.argv) != 2:
        sys.stderr.write("usage: netns_run.py SPEC.json\n")
        sys.exit(2)
    sys.exit(outside(sys.argv[1]))
