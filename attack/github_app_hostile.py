#!/usr/bin/env python3
"""A hostile GitHub stand-in for a github_app: secret (expires_at far past/future/garbage, CRLF
or control bytes in the token, a token equal to another secret, 40-digit numbers). Real binary.
Also: a private_key file that is /dev/urandom, a 1 GB sparse file (through a symlink)."""
import os, subprocess, socket, sys, tempfile, time
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_endpoints.py")).read().split("SCENARIOS = {")[0]
g = {}; exec(src, g)
BIN = os.environ.get("BIN", ".build/debug/scopeproxy")
CANARY = "ghs_CANARYapp0123456789"
KEYDIR = tempfile.mkdtemp()
subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{KEYDIR}/k.pem"], check=True, capture_output=True)
os.chmod(f"{KEYDIR}/k.pem", 0o600)

def gh(body, status=201):
    return g["j"](body, status=status)

def run(name, handler, keypath=None, requests=2):
    osrv = g["raw_server"](lambda c, r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    oport = osrv.getsockname()[1]
    tsrv = g["raw_server"](handler); tport = tsrv.getsockname()[1]
    listen = g["free_port"](); d = tempfile.mkdtemp()
    open(f"{d}/c.yaml", "w").write(f"""listen: 127.0.0.1:{listen}
secrets:
  key: {{ file: {keypath or KEYDIR + '/k.pem'} }}
  other: {{ env: ATTACK_OTHER }}
  app:
    github_app: {{ app_id: "1", installation_id: "2", private_key: key, api_url: "http://127.0.0.1:{tport}" }}
scopes:
  - name: a
    origins: ["http://127.0.0.1:{oport}"]
    inject: {{ Authorization: "Bearer ${{app}}" }}
  - name: b
    origins: ["http://127.0.0.1:9"]
    inject: {{ X-Other: "${{other}}" }}
""")
    p = subprocess.Popen([BIN, "run", "--config", f"{d}/c.yaml"], env={"PATH": "/usr/bin:/bin", "HOME": d, "ATTACK_OTHER": "CANARYotherSecret42"},
                         stdout=open(f"{d}/log", "wb"), stderr=subprocess.STDOUT)
    for _ in range(50):
        try: socket.create_connection(("127.0.0.1", listen), 0.2).close(); break
        except OSError: time.sleep(0.1)
    statuses = []; t0 = time.time()
    for _ in range(requests):
        try:
            c = socket.create_connection(("127.0.0.1", listen), 60)
            c.sendall(b"GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % oport)
            a = b""
            while True:
                x = c.recv(65536)
                if not x: break
                a += x
            statuses.append(a.split(b"\r\n")[0].decode()[9:12] + ("!canary" if b"CANARY" in a else ""))
        except Exception as e:
            statuses.append(f"err {e}")
        time.sleep(1.1)
    alive = p.poll() is None
    p.terminate(); p.wait()
    log = open(f"{d}/log", "rb").read()
    f = []
    if not alive: f.append("died")
    if b"CANARY" in log: f.append("canary in log")
    if any("!canary" in s for s in statuses): f.append("canary in answer")
    line = [l for l in log.decode(errors="replace").splitlines() if "fetch_failed" in l or "refused" in l][:1]
    print(f"{'FINDING' if f else 'ok':8} {name:28} {statuses} {time.time()-t0:.1f}s {f} {line[0][-130:] if line else ''}", flush=True)
    return not f

ok = True
ok &= run("expires_past", gh('{"token":"%s","expires_at":"2000-01-01T00:00:00Z"}' % CANARY), requests=3)
ok &= run("expires_far_future", gh('{"token":"%s","expires_at":"9999-12-31T23:59:59Z"}' % CANARY))
ok &= run("expires_garbage", gh('{"token":"%s","expires_at":"99999999999999999999999999999999999999-01-01"}' % CANARY))
ok &= run("expires_number_40", gh('{"token":"%s","expires_at":1234567890123456789012345678901234567890}' % CANARY))
ok &= run("token_crlf", gh('{"token":"%s\\r\\nX-Evil: 1","expires_at":"2099-01-01T00:00:00Z"}' % CANARY))
ok &= run("token_is_other_secret", gh('{"token":"CANARYotherSecret42","expires_at":"2099-01-01T00:00:00Z"}'))
# Oracle probes: a token that is a prefix of another secret, or holds it: does the client's answer differ?
ok &= run("token_prefix_of_other", gh('{"token":"CANARYotherSec","expires_at":"2099-01-01T00:00:00Z"}'))
ok &= run("token_contains_other", gh('{"token":"xCANARYotherSecret42y","expires_at":"2099-01-01T00:00:00Z"}'))
ok &= run("status_200_not_201", gh('{"token":"%s","expires_at":"2099-01-01T00:00:00Z"}' % CANARY, status=200))
ok &= run("error_echoes_token", gh('{"message":"%s"}' % CANARY, status=422))
os.symlink("/dev/urandom", f"{KEYDIR}/urandom.pem")
with open(f"{KEYDIR}/sparse", "wb") as fh: fh.truncate(1 << 30)
os.chmod(f"{KEYDIR}/sparse", 0o600)
os.symlink(f"{KEYDIR}/sparse", f"{KEYDIR}/sparse.pem")
for k in ["urandom.pem", "sparse.pem"]:
    t0 = time.time()
    open(f"{KEYDIR}/check.yaml", "w").write(f"secrets:\n  key: {{ file: {KEYDIR}/{k} }}\n  app:\n    github_app: {{ app_id: \"1\", installation_id: \"2\", private_key: key }}\nscopes:\n  - name: a\n    origins: [\"https://api.github.com\"]\n    inject: {{ Authorization: \"Bearer ${{app}}\" }}\n")
    r = subprocess.run([BIN, "check", "--config", f"{KEYDIR}/check.yaml"],
                       capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": KEYDIR})
    print(f"{'ok':8} check with key {k:18} rc={r.returncode} {time.time()-t0:.1f}s {(r.stdout + r.stderr).strip().splitlines()[-1][:150] if (r.stdout + r.stderr).strip() else ''}", flush=True)
sys.exit(0 if ok else 1)
