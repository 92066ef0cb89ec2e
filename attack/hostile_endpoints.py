#!/usr/bin/env python3
"""Hostile token endpoint / GitHub stand-in against the real binary.

For each scenario: a loopback endpoint answers badly; a client asks the proxy for a scoped
origin. Checks: the proxy is still alive, the client's answer and the proxy's log hold no canary,
the origin never sees a header carrying CR/LF, the request ends (no hang past the timeout).
Also: token_url pointing at the proxy's own listener (must be refused, not a self-connection).
Run from the worktree root after `swift build`. Prints one line per scenario; exit 1 on a finding.
"""
import gzip, json, os, socket, subprocess, sys, tempfile, threading, time

BIN = os.environ.get("BIN", ".build/debug/scopeproxy")
CANARY = "CANARYtok9f31"
SECRET = "CANARYclientsecret77"


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def raw_server(handler):
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0)); srv.listen(16)
    def loop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda: serve(c), daemon=True).start()
    def serve(c):
        try:
            c.settimeout(5); data = b""
            while b"\r\n\r\n" not in data:
                d = c.recv(65536)
                if not d: break
                data += d
            handler(c, data)
        except Exception:
            pass
        finally:
            try: c.close()
            except Exception: pass
    threading.Thread(target=loop, daemon=True).start()
    return srv


def j(obj_text, status=200, extra=b""):
    body = obj_text.encode() if isinstance(obj_text, str) else obj_text
    return lambda c, req: c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra) + body)


def forever_chunked(c, req):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    end = time.time() + 20
    while time.time() < end:
        c.sendall(b"1\r\n \r\n"); time.sleep(0.05)


def dribble(c, req):
    msg = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"access_token":"' + CANARY.encode() + b'","x":1}'
    for b in msg:
        c.sendall(bytes([b])); time.sleep(0.5)


def http10(c, req):
    c.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"access_token":"%s","token_type":"bearer","expires_in":3600}' % CANARY.encode())


def huge(c, req):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
    chunk = b'{"access_token":"' + CANARY.encode() + b'"' + b" " * 65000
    try:
        for _ in range(1500): c.sendall(chunk)
    except Exception: pass


def gz(c, req):
    body = gzip.compress(json.dumps({"access_token": CANARY, "token_type": "bearer"}).encode())
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


SCENARIOS = {
    "crlf_in_token": j('{"access_token":"%s\\r\\nX-Evil: 1","token_type":"bearer"}' % CANARY),
    "nul_in_token": j('{"access_token":"%s\\u0000x","token_type":"bearer"}' % CANARY),
    "expires_40_digits": j('{"access_token":"%s","token_type":"bearer","expires_in":1234567890123456789012345678901234567890}' % CANARY),
    "expires_negative_huge": j('{"access_token":"%s","token_type":"bearer","expires_in":-1234567890123456789012345678901234567890}' % CANARY),
    "expires_float_exp": j('{"access_token":"%s","token_type":"bearer","expires_in":1e400}' % CANARY),
    "dup_keys": j('{"access_token":"%s","access_token":"%s2","token_type":"bearer"}' % (CANARY, CANARY)),
    "token_equals_client_secret": j('{"access_token":"%s","token_type":"bearer"}' % SECRET),
    "error_with_token_in_description": j('{"error":"invalid_client","error_description":"%s"}' % CANARY, status=400),
    "redirect": lambda c, req: c.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/%s\r\nContent-Length: 0\r\n\r\n" % CANARY.encode()),
    "chunked_forever": forever_chunked,
    "dribble": dribble,
    "http10_close": http10,
    "huge": huge,
    "gzip": gz,
    "deep_nesting": j('{"access_token":"%s","x":%s1%s}' % (CANARY, "[" * 100000, "]" * 100000)),
    "long_token_16k": j('{"access_token":"%s%s","token_type":"bearer"}' % (CANARY, "a" * 16384)),
}


def run_scenario(name, handler, loop_to_self=False):
    origin_headers = []
    def origin(c, req):
        origin_headers.append(req)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    osrv = raw_server(origin)
    oport = osrv.getsockname()[1]
    listen = free_port()
    if loop_to_self:
        tport = listen
    else:
        tsrv = raw_server(handler); tport = tsrv.getsockname()[1]
    d = tempfile.mkdtemp()
    cfg = f"""listen: 127.0.0.1:{listen}
secrets:
  cs: {{ env: ATTACK_CLIENT_SECRET }}
  tok:
    oauth2:
      token_url: "http://127.0.0.1:{tport}/token"
      grant: client_credentials
      client_id: me
      client_secret: cs
scopes:
  - name: a
    origins: ["http://127.0.0.1:{oport}"]
    inject: {{ Authorization: "Bearer ${{tok}}" }}
"""
    open(f"{d}/c.yaml", "w").write(cfg)
    env = {"PATH": "/usr/bin:/bin", "HOME": d, "ATTACK_CLIENT_SECRET": SECRET}
    log = open(f"{d}/log", "wb")
    p = subprocess.Popen([BIN, "run", "--config", f"{d}/c.yaml"], env=env, stdout=log, stderr=log)
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", listen), 0.2).close(); break
        except OSError:
            time.sleep(0.1)
    t0 = time.time()
    answer = b""
    try:
        c = socket.create_connection(("127.0.0.1", listen), 60)
        c.sendall(b"GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % (oport, oport))
        while True:
            d2 = c.recv(65536)
            if not d2: break
            answer += d2
    except Exception as e:
        answer += b"<client error %r>" % repr(e).encode()
    took = time.time() - t0
    time.sleep(0.3)
    alive = p.poll() is None
    p.terminate()
    try: p.wait(5)
    except Exception: p.kill()
    logtext = open(f"{d}/log", "rb").read()
    findings = []
    if not alive: findings.append(f"proxy died rc={p.returncode}")
    if took > 40: findings.append(f"request took {took:.0f}s")
    status = answer.split(b"\r\n", 1)[0]
    body_has = CANARY.encode() in answer.split(b"\r\n\r\n", 1)[-1] or (SECRET.encode() in answer)
    if body_has: findings.append("canary in client answer")
    if CANARY.encode() in logtext or SECRET.encode() in logtext: findings.append("canary in log")
    for h in origin_headers:
        if b"X-Evil" in h: findings.append("CRLF header injected at origin")
    print(f"{'FINDING' if findings else 'ok':8} {name:34} {status.decode(errors='replace')[:40]:40} {took:5.1f}s origin_reqs={len(origin_headers)} {findings}")
    if findings:
        print("   log tail:", logtext[-600:].decode(errors="replace").replace("\n", "\n      "))
    return not findings


only = sys.argv[1:]
ok = True
for name, h in SCENARIOS.items():
    if only and name not in only: continue
    ok &= run_scenario(name, h)
if not only or "loop" in only:
    ok &= run_scenario("loop_token_url_is_own_listener", None, loop_to_self=True)
sys.exit(0 if ok else 1)
