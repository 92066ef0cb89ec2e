"""A gRPC origin for the engine tests (grpcio, generic handlers: no generated code).

usage: grpc_server.py LOG [CERT KEY]   (with CERT and KEY: TLS, else insecure h2c)
Prints its port, then serves until killed. Every call appends one JSON line to LOG: the method,
its invocation metadata and what it received.

Methods (messages are raw bytes):
  /svc/Unary    echoes the request; trailing metadata `x-echo-auth` echoes the call's `authorization`
  /svc/Stream   the request is a count N: answers N messages of 16 KiB (server streaming)
  /svc/Collect  client streaming: answers the number of messages and bytes received, "N/B"
  /svc/Fail     aborts PERMISSION_DENIED with a message that needs percent-encoding
"""
import json
import sys
import threading
from concurrent import futures

import grpc

LOG = sys.argv[1]
lock = threading.Lock()
FAIL_MESSAGE = "denied: scope says no (détails ✓ 100%)"


def record(method, context, **extra):
    entry = {"method": method, "metadata": [[k, v if isinstance(v, str) else "<binary>"] for k, v in context.invocation_metadata()]}
    entry.update(extra)
    with lock, open(LOG, "a") as log:
        log.write(json.dumps(entry) + "\n")


def auth(context):
    return dict(context.invocation_metadata()).get("authorization", "-")


def unary(request, context):
    record("Unary", context, body=request.decode("latin-1"))
    context.set_trailing_metadata((("x-echo-auth", auth(context)),))
    return b"echo:" + request + b" auth=" + auth(context).encode()


def stream(request, context):
    count = int(request.decode())
    record("Stream", context, count=count)
    for index in range(count):
        yield (b"%08d" % index) + b"x" * (16 * 1024 - 8)


def collect(requests, context):
    count = 0
    total = 0
    for message in requests:
        count += 1
        total += len(message)
    record("Collect", context, count=count, bytes=total)
    return b"%d/%d" % (count, total)


def fail(request, context):
    record("Fail", context)
    context.abort(grpc.StatusCode.PERMISSION_DENIED, FAIL_MESSAGE)


handlers = grpc.method_handlers_generic_handler(
    "svc",
    {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Collect": grpc.stream_unary_rpc_method_handler(collect),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
    },
)
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers((handlers,))
if len(sys.argv) >= 4:
    with open(sys.argv[2], "rb") as cert, open(sys.argv[3], "rb") as key:
        credentials = grpc.ssl_server_credentials(((key.read(), cert.read()),))
    port = server.add_secure_port("127.0.0.1:0", credentials)
else:
    port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
server.wait_for_termination()
