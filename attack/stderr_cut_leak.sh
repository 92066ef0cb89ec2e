#!/bin/sh
# A failing `command:` secret's stderr first line is logged (credential_command_failed), cut to
# 200 bytes and made printable BEFORE secret values are replaced: a value that straddles byte 200
# (or holds a non-ASCII byte) is not recognised, and its first bytes reach the error log.
# Here the command's stderr is 180 x's then the value of another secret (an env: secret).
# Run from the worktree root after `swift build`. Exit 1 = part of the secret is in the log.
set -u
BIN=${BIN:-.build/debug/scopeproxy}
D=$(mktemp -d)
trap 'kill $PROXY 2>/dev/null; rm -rf "$D"' EXIT
SECRET=CANARYstderrcut0123456789abcdefghij
cat > "$D/cmd.sh" <<EOS
#!/bin/sh
printf '%s%s\n' "\$(printf '%0180d' 0 | tr 0 x)" '$SECRET' >&2
exit 1
EOS
chmod +x "$D/cmd.sh"
cat > "$D/c.yaml" <<EOS
listen: 127.0.0.1:0
secrets:
  other: { env: ATTACK_OTHER }
  tok: { command: ["$D/cmd.sh"] }
scopes:
  - name: a
    origins: ["http://127.0.0.1:9"]
    inject: { Authorization: "Bearer \${tok}", X-Other: "\${other}" }
EOS
env -i PATH=/usr/bin:/bin HOME="$D" ATTACK_OTHER=$SECRET "$BIN" run --config "$D/c.yaml" > "$D/out" 2> "$D/err" & PROXY=$!
for i in 1 2 3 4 5 6 7 8 9 10; do PPORT=$(grep -ho "listening on 127.0.0.1:[0-9]*" "$D/out" "$D/err" 2>/dev/null | head -1 | sed 's/.*://'); [ -n "$PPORT" ] && break; sleep 0.5; done
curl -s -o /dev/null -x "http://127.0.0.1:$PPORT" "http://127.0.0.1:9/" ; sleep 0.5
grep credential_command_failed "$D/out" "$D/err" | head -2
if grep -q CANARYstderr "$D/out" "$D/err"; then echo "LEAK: a prefix of the secret is in the log"; exit 1; fi
echo "no leak"; exit 0
