#!/usr/bin/env python3
"""AWS chain (credentials: default) against hostile local files and endpoints, with the real binary.
Every AWS_* variable is pinned (env -i); nothing touches ~/.aws or the real 169.254.169.254.
Checks: the proxy survives, the request ends, the answer/log hold no canary, and endpoints
pointing at the proxy's own listener / admin port are refused (no self-connection)."""
import os, socket, subprocess, sys, tempfile, threading, time

BIN = os.environ.get("BIN", ".build/debug/scopeproxy")
CANARY = "CANARYawsSECRET0123456789"


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def scenario(name, files, env_fn, extra_check=None):
    d = tempfile.mkdtemp()
    listen, admin = free_port(), free_port()
    for fname, content in files.items():
        path = os.path.join(d, fname)
        if content == "FIFO":
            os.mkfifo(path)
        elif content.startswith("SYMLINK:"):
            os.symlink(content[8:], path)
        else:
            open(path, "w").write(content)
    open(f"{d}/c.yaml", "w").write(f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
scopes:
  - name: s3
    origins: ["http://127.0.0.1:9"]
    sign: {{ aws_sigv4: {{ service: s3, region: eu-west-1, credentials: default }} }}
""")
    env = {"PATH": "/usr/bin:/bin", "HOME": d, "AWS_CONFIG_FILE": f"{d}/config", "AWS_SHARED_CREDENTIALS_FILE": f"{d}/credentials",
           "AWS_EC2_METADATA_DISABLED": "true"}
    env.update(env_fn(d, listen, admin))
    log = open(f"{d}/log", "wb")
    p = subprocess.Popen([BIN, "run", "--config", f"{d}/c.yaml"], env=env, stdout=log, stderr=log)
    for _ in range(50):
        try: socket.create_connection(("127.0.0.1", listen), 0.2).close(); break
        except OSError: time.sleep(0.1)
    t0 = time.time(); answer = b""
    try:
        c = socket.create_connection(("127.0.0.1", listen), 60)
        c.sendall(b"GET http://127.0.0.1:9/b/k HTTP/1.1\r\nHost: 127.0.0.1:9\r\nConnection: close\r\n\r\n")
        while True:
            x = c.recv(65536)
            if not x: break
            answer += x
    except Exception as e:
        answer += b"<client error %r>" % repr(e).encode()
    took = time.time() - t0
    alive = p.poll() is None
    p.terminate()
    try: p.wait(5)
    except Exception: p.kill()
    text = open(f"{d}/log", "rb").read()
    findings = []
    if not alive: findings.append(f"died rc={p.returncode}")
    if took > 15: findings.append(f"took {took:.0f}s")
    if CANARY.encode() in answer or CANARY.encode() in text: findings.append("canary leaked")
    if extra_check: findings += extra_check(text)
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    detail = [l for l in text.decode(errors="replace").splitlines() if "credential_fetch_failed" in l or "loop" in l][:1]
    print(f"{'FINDING' if findings else 'ok':8} {name:34} {status[:28]:28} {took:5.1f}s {findings} {detail[0][-160:] if detail else ''}")
    return not findings


def no_self_accept(text):
    return ["own_connection seen"] if b"own_connection" in text else []

ok = True
loop = "".join(f"[profile p{i}]\nrole_arn = arn:aws:iam::123456789012:role/r\nsource_profile = p{(i + 1) % 3}\n" for i in range(3))
ok &= scenario("source_profile_loop", {"config": loop}, lambda d, l, a: {"AWS_PROFILE": "p0", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"})
many = "".join(f"[profile p{i}]\nregion = eu-west-1\n" for i in range(10000)) + "[profile last]\naws_access_key_id = AKIDLAST\naws_secret_access_key = " + CANARY + "\n"
ok &= scenario("10000_profiles", {"config": many}, lambda d, l, a: {"AWS_PROFILE": "last"})
ok &= scenario("2MB_line", {"config": "[default]\nx = " + "a" * (2 << 20) + "\n"}, lambda d, l, a: {})
ok &= scenario("credential_process_semicolon", {"config": "[default]\ncredential_process = /bin/echo ; touch /tmp/attack-pwned-by-shell\n"}, lambda d, l, a: {})
if os.path.exists("/tmp/attack-pwned-by-shell"): print("FINDING credential_process ran through a shell"); ok = False
ok &= scenario("web_identity_fifo", {"tok": "FIFO"}, lambda d, l, a: {"AWS_WEB_IDENTITY_TOKEN_FILE": f"{d}/tok", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"})
ok &= scenario("web_identity_dev_zero", {"tok": "SYMLINK:/dev/zero"}, lambda d, l, a: {"AWS_WEB_IDENTITY_TOKEN_FILE": f"{d}/tok", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"})
ok &= scenario("web_identity_proc_environ", {"tok": "SYMLINK:/proc/self/environ"}, lambda d, l, a: {"AWS_WEB_IDENTITY_TOKEN_FILE": f"{d}/tok", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r", "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9", "X_CANARY": CANARY})
ok &= scenario("sts_is_own_listener", {"tok": "eyJ.token"}, lambda d, l, a: {"AWS_WEB_IDENTITY_TOKEN_FILE": f"{d}/tok", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r", "AWS_ENDPOINT_URL_STS": f"http://127.0.0.1:{l}"}, no_self_accept)
ok &= scenario("sts_is_admin_port", {"tok": "eyJ.token"}, lambda d, l, a: {"AWS_WEB_IDENTITY_TOKEN_FILE": f"{d}/tok", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/r", "AWS_ENDPOINT_URL_STS": f"http://127.0.0.1:{a}"}, no_self_accept)
ok &= scenario("container_full_uri_own_listener", {}, lambda d, l, a: {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"http://127.0.0.1:{l}/creds"}, no_self_accept)
ok &= scenario("container_full_uri_admin", {}, lambda d, l, a: {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"http://127.0.0.1:{a}/metrics"}, no_self_accept)
ok &= scenario("imds_own_listener", {}, lambda d, l, a: {"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{l}"}, no_self_accept)
ok &= scenario("imds_admin", {}, lambda d, l, a: {"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://[::ffff:127.0.0.1]:{a}"}, no_self_accept)
ok &= scenario("imds_localhost_name_own", {}, lambda d, l, a: {"AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://localhost:{l}"}, no_self_accept)
sys.exit(0 if ok else 1)
