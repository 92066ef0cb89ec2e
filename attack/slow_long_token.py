#!/usr/bin/env python3
"""A token endpoint answering a 16 KiB access_token (under every limit) makes the first request
that needs it take ~15 s in a debug build (the proxy's work after the answer, not the network).
Usage: slow_long_token.py [token_length] [requests]. Prints each request's time."""
import os, socket, subprocess, sys, tempfile, time, threading
sys.path.insert(0, os.path.dirname(__file__))
import importlib.util
spec = importlib.util.spec_from_file_location("h", os.path.join(os.path.dirname(__file__), "hostile_endpoints.py"))
BIN = os.environ.get("BIN", ".build/debug/scopeproxy")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
reqs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
src = open(os.path.join(os.path.dirname(__file__), "hostile_endpoints.py")).read().split("SCENARIOS = {")[0]
g = {}; exec(src, g)
tok = "CANARYtok9f31" + "a" * n
tsrv = g["raw_server"](g["j"]('{"access_token":"%s","token_type":"bearer","expires_in":3600}' % tok))
osrv = g["raw_server"](lambda c, r: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
oport = osrv.getsockname()[1]; tport = tsrv.getsockname()[1]; listen = g["free_port"]()
d = tempfile.mkdtemp()
open(f"{d}/c.yaml", "w").write(f"""listen: 127.0.0.1:{listen}
secrets:
  cs: {{ env: ATTACK_CLIENT_SECRET }}
  tok: {{ oauth2: {{ token_url: "http://127.0.0.1:{tport}/token", grant: client_credentials, client_id: me, client_secret: cs }} }}
scopes:
  - name: a
    origins: ["http://127.0.0.1:{oport}"]
    inject: {{ Authorization: "Bearer ${{tok}}" }}
""")
p = subprocess.Popen([BIN, "run", "--config", f"{d}/c.yaml"], env={"PATH": "/usr/bin:/bin", "HOME": d, "ATTACK_CLIENT_SECRET": "CANARYclientsecret77"},
                     stdout=open(f"{d}/log", "wb"), stderr=subprocess.STDOUT)
print("pid", p.pid, flush=True)
time.sleep(1.5)
for i in range(reqs):
    t0 = time.time()
    c = socket.create_connection(("127.0.0.1", listen), 120)
    c.sendall(b"GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % (oport, oport))
    a = b""
    while True:
        x = c.recv(65536)
        if not x: break
        a += x
    line = a.split(b"\r\n")[0].decode(); print(f"request {i}: {line} {time.time()-t0:.2f}s", flush=True)
p.terminate(); p.wait()
