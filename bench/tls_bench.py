#!/usr/bin/env python3
"""TLS benchmark: handshakes per second and keep-alive requests per second through scopeproxy's
interception, next to plain HTTP through the proxy and direct HTTPS to the origin, all driven by the
same Python client (several processes) so the modes compare with each other. Also prints the proxy's
CPU-us per request from /proc. Loopback only, bounded in time. Run by `make bench` after run.sh."""
import multiprocessing, os, shutil, socket, ssl, subprocess, sys, tempfile, time

DURATION = float(os.environ.get("BENCH_DURATION", "5"))
CLIENTS = int(os.environ.get("BENCH_TLS_CLIENTS", "4"))
BINARY = os.environ.get("SCOPEPROXY_BINARY", ".build/release/scopeproxy")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close(); return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"port {port} never opened")

def openssl(work, *args):
    subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)

def read_response(sock_file):
    length = 0
    while True:
        line = sock_file.readline()
        if not line: raise EOFError
        if line in (b"\r\n", b"\n"): break
        if line.lower().startswith(b"content-length:"): length = int(line.split(b":")[1])
    sock_file.read(length)

def client(args):
    mode, proxy_port, origin_port, tls_port, ca_file, deadline = args
    context = ssl.create_default_context(cafile=ca_file)
    count = 0
    def connect():
        if mode == "plain-proxy":
            return socket.create_connection(("127.0.0.1", proxy_port))
        if mode.startswith("direct-https"):
            return context.wrap_socket(socket.create_connection(("127.0.0.1", tls_port)), server_hostname="localhost")
        raw = socket.create_connection(("127.0.0.1", proxy_port))
        raw.sendall(f"CONNECT localhost:{tls_port} HTTP/1.1\r\nHost: localhost:{tls_port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head: head += raw.recv(1024)
        return context.wrap_socket(raw, server_hostname="localhost")
    request = (f"GET http://127.0.0.1:{origin_port}/1k HTTP/1.1\r\nHost: 127.0.0.1:{origin_port}\r\n\r\n" if mode == "plain-proxy"
               else f"GET /1k HTTP/1.1\r\nHost: localhost:{tls_port}\r\n\r\n").encode()
    new_connection = mode.endswith("handshake")
    sock = None
    while time.time() < deadline:
        if sock is None:
            sock = connect(); sock_file = sock.makefile("rb")
        sock.sendall(request if not new_connection else request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        read_response(sock_file)
        count += 1
        if new_connection:
            sock_file.close(); sock.close(); sock = None
    return count

def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])

def main():
    work = tempfile.mkdtemp(prefix="scopeproxy-tlsbench-")
    procs = []
    try:
        openssl(work, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench CA")
        openssl(work, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost")
        open(f"{work}/ext", "w").write("subjectAltName=DNS:localhost\n")
        openssl(work, "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem", "-days", "1", "-extfile", "ext")
        os.makedirs(f"{work}/www"); open(f"{work}/www/1k", "wb").write(os.urandom(1024))
        origin_port, tls_port, proxy_port = free_port(), free_port(), free_port()
        open(f"{work}/nginx.conf", "w").write(f"""worker_processes 1; daemon off; pid {work}/nginx.pid; error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{origin_port}; root {work}/www; }}
  server {{ listen 127.0.0.1:{tls_port} ssl; ssl_certificate {work}/srv.pem; ssl_certificate_key {work}/srv.key; root {work}/www; }} }}""")
        procs.append(subprocess.Popen(["taskset", "-c", "1", "nginx", "-c", f"{work}/nginx.conf", "-p", work]))
        open(f"{work}/c.yaml", "w").write(f"tls: {{ intercept: [localhost], ca_dir: {work}/ca, upstream_ca: {work}/ca.pem }}\n")
        proxy = subprocess.Popen(["taskset", "-c", "0", BINARY, "run", "--config", f"{work}/c.yaml", "--listen", f"127.0.0.1:{proxy_port}", "--threads", "1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proxy)
        for port in (origin_port, tls_port, proxy_port): wait_port(port)
        ca_pem = open(f"{work}/ca/scopeproxy-ca.pem").read()
        open(f"{work}/trust.pem", "w").write(ca_pem + open(f"{work}/ca.pem").read())
        tick_us = 1_000_000 / os.sysconf("SC_CLK_TCK")
        print(f"TLS benchmark: {CLIENTS} Python client processes on core 1 for {DURATION:.0f}s per mode; scopeproxy on core 0")
        print(f"{'mode':<28} {'req/s':>9} {'proxy cpu-us/req':>17}")
        for mode in ["plain-proxy", "intercept-keepalive", "direct-https-keepalive", "intercept-handshake", "direct-https-handshake"]:
            deadline = time.time() + DURATION
            before = cpu_ticks(proxy.pid)
            with multiprocessing.Pool(CLIENTS) as pool:
                os.sched_setaffinity(0, {1})
                counts = pool.map(client, [(mode, proxy_port, origin_port, tls_port, f"{work}/trust.pem", deadline)] * CLIENTS)
            used = (cpu_ticks(proxy.pid) - before) * tick_us
            total = sum(counts)
            per_request = "-" if mode.startswith("direct") else f"{used / max(total, 1):.1f}"
            print(f"{mode:<28} {total / DURATION:>9.0f} {per_request:>17}")
    finally:
        for p in procs: p.terminate()
        time.sleep(0.3)
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
