# Shared by bench/run.sh and bench/soak.sh (sourced): a scratch workspace, loopback ports and the
# nginx origin.

# start_workspace NAME: $WORK is a fresh directory; processes added to PIDS (and their children) are
# killed and the directory removed when the script exits, however it exits: the end, an error under
# `set -e`, Ctrl-C, SIGTERM or SIGHUP.
start_workspace() {
  WORK=$(mktemp -d "/tmp/scopeproxy-$1.XXXXXX")
  chmod 777 "$WORK"
  PIDS=()
  trap cleanup_workspace EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}
# The process ids of PID's descendants, deepest first.
descendants() { local child; for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$child"; echo "$child"; done; }
cleanup_workspace() {
  trap '' INT TERM HUP
  local pid all=() alive
  for pid in "${PIDS[@]}"; do all+=($(descendants "$pid") "$pid"); done
  for pid in "${all[@]}"; do kill "$pid" 2>/dev/null || true; done
  # SIGTERM first (squid, nginx and the Python helpers clean up after themselves), SIGKILL after 5 s.
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${all[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "port $1 never opened" >&2
  return 1
}

# nginx_preamble DIR: the lines every benchmark nginx starts with (one worker, in the foreground,
# its pid and error log in DIR, no access log), up to the open `http {` block.
nginx_preamble() {
  cat <<CONF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log crit;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $1;
CONF
}

# write_nginx_origin DIR PORT [EXTRA_SERVER_DIRECTIVES]: a one-worker nginx config serving DIR/www
# on 127.0.0.1:PORT, with files 1k, 64k and 1m; the caller starts it (pinned or not).
write_nginx_origin() {
  local dir=$1 port=$2 extra=${3:-}
  mkdir -p "$dir/www" "$dir/nginx"
  head -c 1024 /dev/urandom > "$dir/www/1k"
  head -c 65536 /dev/urandom > "$dir/www/64k"
  head -c 1048576 /dev/urandom > "$dir/www/1m"
  { nginx_preamble "$dir/nginx"; cat <<CONF
  server {
    listen 127.0.0.1:$port;
    root $dir/www;
    $extra
  }
}
CONF
  } > "$dir/nginx/nginx.conf"
}

# write_nginx_relay DIR PORT ORIGIN_PORT TOKEN [SINK_PORT]: nginx as a plain HTTP/1.1 relay, the floor a
# forwarding proxy is measured against (bench/run.sh's "nginx relay" column, bench/cost.sh's
# "relay" row): one worker, absolute-form request targets forwarded to the origin over pooled
# keep-alive connections, one header set (the Authorization the full configuration injects), no
# buffering either way, no access log; requests for /upload go to SINK_PORT (the upload sink), pooled
# the same way. nginx has no CONNECT: tunnels are not measured for it. The config is DIR/relay/nginx.conf; the caller starts it (pinned or not, `master_process off` or not).
write_nginx_relay() {
  local dir=$1 port=$2 origin=$3 token=$4 sink=${5:-$3}
  mkdir -p "$dir/relay"
  { nginx_preamble "$dir/relay"; cat <<CONF
  proxy_temp_path $dir/relay;
  upstream origin { server 127.0.0.1:$origin; keepalive 64; keepalive_requests 1000000; }
  upstream sink { server 127.0.0.1:$sink; keepalive 8; }
  server {
    listen 127.0.0.1:$port;
    client_max_body_size 0;
    proxy_http_version 1.1;
    proxy_set_header Host \$http_host;
    proxy_set_header Connection "";
    proxy_set_header Authorization "Bearer $token";
    proxy_buffering off;
    proxy_request_buffering off;
    location / { proxy_pass http://origin; }
    # (routing by Host with a variable in proxy_pass lost the upstream keep-alive: a connect for
    # every second request)
    location = /upload { proxy_pass http://sink; }
  }
}
CONF
  } > "$dir/relay/nginx.conf"
}
