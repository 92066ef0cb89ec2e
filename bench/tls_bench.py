#!/usr/bin/env python3
"""TLS benchmark: scopeproxy and mitmdump side by side, each intercepting the same HTTPS origin (nginx)
with its own CA, which the client trusts (verification is never turned off; each proxy verifies the
origin against the origin's CA). One client (several processes on core 1) drives every case: the
compiled bench/tls_client.c (OpenSSL; built here with `cc`), or with BENCH_TLS_CLIENT=python the
Python client below, which bounded the rates it measured:
plain HTTP through the proxy, intercepted HTTPS with keep-alive, intercepted HTTPS with a new
connection (CONNECT + two handshakes) per request, and direct HTTPS to the origin for reference.
Prints a Markdown table: req/s of each proxy, their ratio, and each proxy's CPU-µs per request from
/proc/PID/stat. Loopback only, bounded in time. `make bench` runs it from bench/run.sh.

    BENCH_TLS_DURATION=5 BENCH_TLS_REPEATS=1 BENCH_TLS_CLIENTS=4 python3 bench/tls_bench.py
"""
import multiprocessing, os, shutil, signal, socket, ssl, statistics, subprocess, sys, tempfile, time

DURATION = float(os.environ.get("BENCH_TLS_DURATION", os.environ.get("BENCH_DURATION", "5")))
REPEATS = int(os.environ.get("BENCH_TLS_REPEATS", "1"))
CLIENTS = int(os.environ.get("BENCH_TLS_CLIENTS", "4"))
CLIENT_KIND = os.environ.get("BENCH_TLS_CLIENT", "c")
BINARY = os.environ.get("SCOPEPROXY_BINARY", ".build/release/scopeproxy")
MODES = [("plain", "plain HTTP through the proxy, keep-alive"),
         ("keepalive", "intercepted HTTPS, keep-alive"),
         ("handshake", "intercepted HTTPS, new connection per request")]

def log(message):
    print(message, file=sys.stderr, flush=True)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def wait_port(port, process, name, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"{name} exited ({process.returncode}) before opening port {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close(); return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{name}: port {port} never opened")

def openssl(work, *args):
    subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)

def read_response(sock_file):
    status = sock_file.readline()
    if not status: raise EOFError("connection closed before a response")
    if b" 200 " not in status: raise ValueError(f"response {status!r}")
    length = 0
    while True:
        line = sock_file.readline()
        if not line: raise EOFError("connection closed in a response head")
        if line in (b"\r\n", b"\n"): break
        if line.lower().startswith(b"content-length:"): length = int(line.split(b":")[1])
    if len(sock_file.read(length)) != length: raise EOFError("short body")

def client(args):
    """One client process until the deadline: returns (requests, error or None)."""
    mode, proxy_port, origin_port, tls_port, ca_file, deadline = args
    context = ssl.create_default_context(cafile=ca_file)  # CERT_REQUIRED, host name checked
    def connect():
        if mode == "plain":
            return socket.create_connection(("127.0.0.1", proxy_port))
        if proxy_port is None:
            return context.wrap_socket(socket.create_connection(("127.0.0.1", tls_port)), server_hostname="localhost")
        raw = socket.create_connection(("127.0.0.1", proxy_port))
        raw.sendall(f"CONNECT localhost:{tls_port} HTTP/1.1\r\nHost: localhost:{tls_port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = raw.recv(1024)
            if not data: raise EOFError("proxy closed the CONNECT")
            head += data
        if b" 200" not in head.split(b"\r\n", 1)[0]: raise ValueError(f"CONNECT answered {head[:60]!r}")
        return context.wrap_socket(raw, server_hostname="localhost")
    request = (f"GET http://127.0.0.1:{origin_port}/1k HTTP/1.1\r\nHost: 127.0.0.1:{origin_port}\r\n\r\n" if mode == "plain"
               else f"GET /1k HTTP/1.1\r\nHost: localhost:{tls_port}\r\n\r\n").encode()
    new_connection = mode == "handshake"
    if new_connection: request = request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    count, sock = 0, None
    try:
        while time.time() < deadline:
            if sock is None:
                sock = connect(); sock_file = sock.makefile("rb")
            sock.sendall(request)
            read_response(sock_file)
            count += 1
            if new_connection:
                sock_file.close(); sock.close(); sock = None
        return count, None
    except Exception as error:  # reported, the table says "failed"
        return count, f"{type(error).__name__}: {error}"

def compiled_clients(binary, args, count):
    """`count` processes of the compiled client, side by side: returns [(requests, error or None)]."""
    mode, proxy_port, origin_port, tls_port, ca_file, deadline = args
    seconds = max(0.0, deadline - time.time())
    procs = [subprocess.Popen([binary, mode, str(proxy_port or 0), str(origin_port), str(tls_port), ca_file, f"{seconds:.3f}"],
                              stdout=subprocess.PIPE, text=True) for _ in range(count)]
    outcomes = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 60)
        count_text, _, error = out.strip().partition(" ")
        outcomes.append((int(count_text or 0), error or None))
    return outcomes

def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])

def stop(procs):
    for p in procs:
        if p.poll() is None: p.terminate()
    deadline = time.time() + 5
    for p in procs:
        try: p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired: p.kill(); p.wait()

def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.sched_setaffinity(0, {1})  # this script and its client processes on core 1; the proxies on core 0
    work = tempfile.mkdtemp(prefix="scopeproxy-tlsbench-")
    os.chmod(work, 0o755)  # nginx's worker runs as another user when started as root: it must read www/
    procs = []
    try:
        openssl(work, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench origin CA")
        openssl(work, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost")
        open(f"{work}/ext", "w").write("subjectAltName=DNS:localhost\n")
        openssl(work, "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem", "-days", "1", "-extfile", "ext")
        os.makedirs(f"{work}/www"); open(f"{work}/www/1k", "wb").write(os.urandom(1024))
        origin_port, tls_port, scope_port, mitm_port = free_port(), free_port(), free_port(), free_port()
        open(f"{work}/nginx.conf", "w").write(f"""worker_processes 1; daemon off; pid {work}/nginx.pid; error_log {work}/error.log crit;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{origin_port}; root {work}/www; }}
  server {{ listen 127.0.0.1:{tls_port} ssl; ssl_certificate {work}/srv.pem; ssl_certificate_key {work}/srv.key; root {work}/www; }} }}""")
        nginx = subprocess.Popen(["taskset", "-c", "1", "nginx", "-c", f"{work}/nginx.conf", "-p", work])
        procs.append(nginx)
        # scopeproxy: intercepts localhost with its CA in ca_dir, verifies the origin against ca.pem; JSON access log to /dev/null.
        open(f"{work}/c.yaml", "w").write(f"tls: {{ intercept: [localhost], ca_dir: {work}/ca, upstream_ca: {work}/ca.pem }}\n")
        scope = subprocess.Popen(["taskset", "-c", "0", BINARY, "run", "--config", f"{work}/c.yaml", "--listen", f"127.0.0.1:{scope_port}", "--threads", "1"],
                                 stdout=subprocess.DEVNULL, stderr=open(f"{work}/scopeproxy.err", "w"))
        procs.append(scope)
        # mitmdump: intercepts every CONNECT with its CA in confdir (created at first start), verifies the origin against ca.pem.
        mitm = subprocess.Popen(["taskset", "-c", "0", "mitmdump", "-q", "--listen-host", "127.0.0.1", "--listen-port", str(mitm_port),
                                 "--set", f"confdir={work}/mitm", "--set", "flow_detail=0",
                                 "--set", f"ssl_verify_upstream_trusted_ca={work}/ca.pem"],
                                stdout=subprocess.DEVNULL, stderr=open(f"{work}/mitmdump.err", "w"))
        procs.append(mitm)
        wait_port(origin_port, nginx, "nginx"); wait_port(tls_port, nginx, "nginx")
        wait_port(scope_port, scope, "scopeproxy"); wait_port(mitm_port, mitm, "mitmdump")
        trust = {"scopeproxy": f"{work}/ca/scopeproxy-ca.pem", "mitmdump": f"{work}/mitm/mitmproxy-ca-cert.pem", "direct": f"{work}/ca.pem"}
        ports = {"scopeproxy": scope_port, "mitmdump": mitm_port, "direct": None}
        pids = {"scopeproxy": scope.pid, "mitmdump": mitm.pid}
        version = subprocess.run(["mitmdump", "--version"], capture_output=True, text=True).stdout.split("\n")[0].split()[-1]
        compiled = None
        if CLIENT_KIND == "c":
            compiled = f"{work}/tls_client"
            subprocess.run(["cc", "-O2", "-o", compiled, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls_client.c"),
                            "-lssl", "-lcrypto"], check=True)
        tick_us = 1_000_000 / os.sysconf("SC_CLK_TCK")

        results = {}  # (mode, target) -> list of (req/s, cpu-us/req or None, error or None)
        for repeat in range(REPEATS):
            for mode, _ in MODES:
                for target in ["direct", "scopeproxy", "mitmdump"]:
                    if target == "direct" and mode == "plain": continue
                    log(f"  TLS {mode} {target} (run {repeat + 1} of {REPEATS})")
                    deadline = time.time() + DURATION
                    pid = pids.get(target)
                    before = cpu_ticks(pid) if pid else 0
                    args = (mode, ports[target], origin_port, tls_port, trust[target], deadline)
                    if compiled:
                        outcomes = compiled_clients(compiled, args, CLIENTS)
                    else:
                        with multiprocessing.Pool(CLIENTS) as pool:
                            outcomes = pool.map(client, [args] * CLIENTS)
                    used = (cpu_ticks(pid) - before) * tick_us if pid else 0
                    total = sum(count for count, _ in outcomes)
                    errors = [error for _, error in outcomes if error]
                    for error in sorted(set(errors)): log(f"warning: TLS {mode} through {target}: {error}")
                    results.setdefault((mode, target), []).append(
                        (total / DURATION, used / total if pid and total else None, errors[0] if errors else None))

        def median(mode, target, index):
            runs = results.get((mode, target))
            if not runs or any(run[2] for run in runs): return None
            return statistics.median(run[index] for run in runs)
        def number(value, digits=0):
            return "failed" if value is None else f"{value:.{digits}f}"
        print("### TLS interception: scopeproxy next to mitmdump")
        print()
        kind = "compiled (bench/tls_client.c)" if compiled else "Python"
        print(f"`bench/tls_bench.py`: {CLIENTS} {kind} client processes on core 1 for {DURATION:g} s per case, median of {REPEATS} "
              f"interleaved run(s); the proxy on core 0 (scopeproxy `--threads 1`, JSON access log to /dev/null; mitmdump {version}, "
              f"`-q --set flow_detail=0`), each with its own CA trusted by the client and verifying the origin (nginx, 1 KiB, "
              f"HTTP/1.1) against the origin's CA." + ("" if compiled else " The Python client bounds the absolute rates: compare the columns and the CPU per request."))
        print()
        print("| mode | scopeproxy req/s | mitmdump req/s | scopeproxy ÷ mitmdump | scopeproxy CPU µs/req | mitmdump CPU µs/req | direct HTTPS req/s |")
        print("|---|---|---|---|---|---|---|")
        for mode, label in MODES:
            s, m = median(mode, "scopeproxy", 0), median(mode, "mitmdump", 0)
            ratio = f"{s / m:.2f}" if s is not None and m else "-"
            direct = "-" if mode == "plain" else number(median(mode, "direct", 0))
            print(f"| {label} | {number(s)} | {number(m)} | {ratio} | {number(median(mode, 'scopeproxy', 1), 1)} | "
                  f"{number(median(mode, 'mitmdump', 1), 1)} | {direct} |")
        sys.stdout.flush()
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
