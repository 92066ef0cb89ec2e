"""A gRPC client for the engine tests (grpcio, no generated code). Prints one JSON object.

usage: grpc_client.py PLAN.json
PLAN: {"target": "127.0.0.1:PORT", "authority": "127.0.0.1:ORIGIN" (h2c: the origin, as a forward
proxy reads it), or "ca": PATH and "proxy": "http://127.0.0.1:PORT" (TLS through the proxy's
interception), "metadata": [[k, v]], "stream_count": N, "collect_count": N, "timeout": S,
"cancel_then_unary": true (also cancel a long stream midway, then call again),
"concurrent_unary": N (only this: N unary calls started at once on the channel, then awaited;
answers {"concurrent": {"ok": count of OK, "codes": [...]}})}
"""
import json
import sys

import grpc

plan = json.load(open(sys.argv[1]))
timeout = plan.get("timeout", 20)
metadata = tuple(tuple(pair) for pair in plan.get("metadata", []))
identity = lambda payload: payload

if "ca" in plan:
    credentials = grpc.ssl_channel_credentials(root_certificates=open(plan["ca"], "rb").read())
    channel = grpc.secure_channel(plan["target"], credentials, options=[("grpc.http_proxy", plan["proxy"]), ("grpc.enable_retries", 0)])
else:
    channel = grpc.insecure_channel(plan["target"], options=[("grpc.default_authority", plan["authority"]), ("grpc.enable_retries", 0)])

answer = {}


def call(name, function):
    try:
        answer[name] = function()
    except grpc.RpcError as error:
        answer[name] = {"code": error.code().name, "details": error.details(), "trailers": [list(p) for p in (error.trailing_metadata() or ())]}


def unary():
    response, state = channel.unary_unary("/svc/Unary", request_serializer=identity, response_deserializer=identity).with_call(
        b"hello", metadata=metadata, timeout=timeout)
    return {"body": response.decode("latin-1"), "code": state.code().name, "trailers": [list(p) for p in state.trailing_metadata()]}


def stream():
    responses = channel.unary_stream("/svc/Stream", request_serializer=identity, response_deserializer=identity)(
        str(plan.get("stream_count", 200)).encode(), metadata=metadata, timeout=timeout)
    count = 0
    ordered = True
    for message in responses:
        ordered = ordered and message[:8] == b"%08d" % count and len(message) == 16 * 1024
        count += 1
    return {"count": count, "ordered": ordered, "code": responses.code().name}


def collect():
    messages = (b"m" * 1000 for _ in range(plan.get("collect_count", 300)))
    response = channel.stream_unary("/svc/Collect", request_serializer=identity, response_deserializer=identity)(
        messages, metadata=metadata, timeout=timeout)
    return {"body": response.decode()}


def fail():
    channel.unary_unary("/svc/Fail", request_serializer=identity, response_deserializer=identity)(b"x", metadata=metadata, timeout=timeout)
    return {"code": "OK"}


def cancel_then_unary():
    """Cancels a long server stream after a few messages, then calls again on the same channel."""
    responses = channel.unary_stream("/svc/Stream", request_serializer=identity, response_deserializer=identity)(
        b"100000", metadata=metadata, timeout=timeout)
    for index, _ in enumerate(responses):
        if index == 4:
            break
    responses.cancel()
    after = unary()
    return {"cancelled": responses.code().name, "after": after["code"], "body": after["body"]}


def concurrent():
    """N unary calls in flight at once: N streams on the channel's one connection to the proxy."""
    method = channel.unary_unary("/svc/Unary", request_serializer=identity, response_deserializer=identity)
    futures = [method.future(b"hello", metadata=metadata, timeout=timeout) for _ in range(plan["concurrent_unary"])]
    codes = []
    for future in futures:
        try:
            future.result()
            codes.append("OK")
        except grpc.RpcError as error:
            codes.append(error.code().name)
    return {"ok": codes.count("OK"), "codes": sorted(set(codes))}


steps = [("unary", unary), ("stream", stream), ("collect", collect), ("fail", fail)]
if plan.get("concurrent_unary"):
    steps = [("concurrent", concurrent)]
if plan.get("cancel_then_unary"):
    steps.append(("cancel_then_unary", cancel_then_unary))
for name, function in steps:
    call(name, function)
print(json.dumps(answer))
