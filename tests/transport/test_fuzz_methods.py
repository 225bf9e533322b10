"""Every method a real server process registers, found through its own reflection service, gets
garbage bytes and random well-formed messages: none may answer UNKNOWN or INTERNAL, leak
internal text in its details, or hang; afterwards health is SERVING and a normal request is
answered correctly.

The methods come from the server (reflection lists exactly what AttnServer registered, see
service/server.py: ServiceRecorder), so a method added later is fuzzed without editing this file.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor as F
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from tests.helpers import free_port, wait_serving
from tests.live import spawn_server, terminate

GARBAGE_PER_METHOD, RANDOM_PER_METHOD = 60, 120
DEADLINE_S = 10.0
# What a status detail must never show: exception class names, tracebacks, source files, server paths.
INTERNAL_TEXT = re.compile(r"Traceback|<class |\b\w*(Error|Exception)\b|\.py\b|/(tmp|root|work|home|usr|opt)/")
# Strings a random message sometimes carries, so that some requests get past the first checks.
KNOWN_STRINGS = ["", "tiny", "1", "2", "TEXT", "BYTES", "OUTPUT", "ATTENTION", "SCORE", "hello", "attnserve.v1.Transducer",
                 "grpc.health.v1.Health", "inference.GRPCInferenceService", "attnserve/v1/attnserve.proto"]
INTS = [0, 1, 2, -1, 7, 64, 255, 2**31 - 1, -2**31, 2**32 - 1, 2**63 - 1, -2**63]


# Fields whose plausible values let a message reach the deeper checks (model name, tensor name and type).
LIKELY = {"name": ["tiny", "TEXT"], "model_name": ["tiny"], "version": ["", "1"], "model_version": ["", "1"],
          "datatype": ["BYTES", "FP32", "INT32"]}


def random_text(rng: random.Random, field_name: str = "") -> str:
    roll = rng.random()
    if field_name in LIKELY and roll < 0.6:
        return rng.choice(LIKELY[field_name])
    if roll < 0.4:
        return rng.choice(KNOWN_STRINGS)
    if roll < 0.7:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(1, 30)))
    # Any code point but surrogates (a protobuf library cannot encode those).
    return "".join(chr(rng.choice([rng.randint(0x20, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
                   for _ in range(rng.randint(1, 12)))


def random_scalar(field, rng: random.Random):
    t = field.type
    if t == F.TYPE_STRING:
        return random_text(rng, field.name)
    if t == F.TYPE_BYTES:
        return rng.randbytes(rng.randint(0, 64)) if rng.random() < 0.7 else random_text(rng).encode()
    if t == F.TYPE_BOOL:
        return rng.random() < 0.5
    if t in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        value = rng.choice([0.0, -1.0, 1e-30, 3.5, 1e30, math.inf, -math.inf, math.nan, rng.uniform(-10, 10)])
        return max(-3e38, min(3e38, value)) if t == F.TYPE_FLOAT and math.isfinite(value) else value
    if t == F.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values] + [rng.randint(-5, 99)])
    bits = 32 if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32) else 64
    unsigned = t in (F.TYPE_UINT32, F.TYPE_FIXED32, F.TYPE_UINT64, F.TYPE_FIXED64)
    lo, hi = (0, 2**bits - 1) if unsigned else (-2**(bits - 1), 2**(bits - 1) - 1)
    return min(hi, max(lo, rng.choice(INTS + [rng.randint(lo, hi)])))


def fill(message, rng: random.Random, depth: int = 0) -> None:
    """Set a random subset of the message's fields to random values, recursively."""
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.4:
            continue
        target = getattr(message, field.name)
        is_message = field.type == F.TYPE_MESSAGE
        if is_message and field.message_type.GetOptions().map_entry:
            key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            for _ in range(rng.randint(1, 3)):
                key = random_scalar(key_field, rng)
                if value_field.type == F.TYPE_MESSAGE:
                    fill(target[key], rng, depth + 1) if depth < 3 else target[key]
                else:
                    target[key] = random_scalar(value_field, rng)
        elif field.is_repeated:
            for _ in range(rng.randint(1, 4)):
                if is_message:
                    if depth < 3:
                        fill(target.add(), rng, depth + 1)
                else:
                    target.append(random_scalar(field, rng))
        elif is_message:
            if depth < 3:
                fill(target, rng, depth + 1)
                target.SetInParent()
        else:
            setattr(message, field.name, random_scalar(field, rng))


def garbage(cls, rng: random.Random) -> bytes:
    """Bytes that do not parse as a `cls` message (random bytes often do: unknown fields are skipped)."""
    shapes = [lambda: rng.randbytes(rng.randint(1, 200)),
              lambda: bytes([0x0F]) + rng.randbytes(rng.randint(0, 20)),  # wire type 7 does not exist
              lambda: bytes([0x0A, 0xFF, 0x7F]) + rng.randbytes(rng.randint(0, 20)),  # a length past the end
              lambda: bytes([0x0A, 0x02, 0xC3, 0x28])]  # a string field with invalid UTF-8 (field 1)
    while True:
        raw = rng.choice(shapes)()
        try:
            cls.FromString(raw)
        except Exception:
            return raw


def registered_methods(channel: grpc.Channel):
    """(path, method descriptor, request class) for every method the server's reflection lists."""
    db = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(db)
    for service_name in db.get_services():
        service = pool.FindServiceByName(service_name)
        for m in service.methods:
            yield f"/{service.full_name}/{m.name}", m, message_factory.GetMessageClass(m.input_type)


def in_band_error(method, raw_responses: list[bytes]) -> tuple[grpc.StatusCode, str] | None:
    """A stream may answer a bad message in-band (TransduceStream's `error`: a status code name)."""
    if "error" not in method.output_type.fields_by_name:
        return None
    cls = message_factory.GetMessageClass(method.output_type)
    for raw in raw_responses:
        reply = cls.FromString(raw)
        if reply.HasField("error"):
            return grpc.StatusCode[reply.error.code], reply.error.message
    return None


def call(channel: grpc.Channel, path: str, method, raw: bytes) -> tuple[grpc.StatusCode, str]:
    """One call with a deadline; a stream that answers at all (Health.Watch never ends) counts as OK."""
    responses: list[bytes] = []
    try:
        if not method.client_streaming and not method.server_streaming:
            channel.unary_unary(path)(raw, timeout=DEADLINE_S)
        elif not method.client_streaming:
            stream = channel.unary_stream(path)(raw, timeout=DEADLINE_S)
            responses.append(next(stream))
            stream.cancel()
        elif not method.server_streaming:
            channel.stream_unary(path)(iter([raw]), timeout=DEADLINE_S)
        else:
            responses.extend(channel.stream_stream(path)(iter([raw]), timeout=DEADLINE_S))
    except grpc.RpcError as e:
        if not (e.code() == grpc.StatusCode.CANCELLED and responses):  # not our own cancel() above
            return e.code(), e.details() or ""
    return in_band_error(method, responses) or (grpc.StatusCode.OK, "")


@pytest.fixture(scope="module")
def server_process(tiny_bundle, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    proc = spawn_server(tiny_bundle, port, log_path=log)
    try:
        wait_serving(f"127.0.0.1:{port}", 120, proc)
        yield f"127.0.0.1:{port}", proc, log
    finally:
        terminate(proc)


def test_every_registered_method_refuses_garbage_and_survives_random_messages(server_process, capsys):
    address, proc, log = server_process
    rng = random.Random(13)
    by_method: dict[str, Counter] = {}
    bad: list[str] = []
    with grpc.insecure_channel(address) as channel:
        methods = list(registered_methods(channel))
        for path, method, cls in methods:
            counts = by_method.setdefault(path, Counter())
            for kind, n in (("garbage", GARBAGE_PER_METHOD), ("random", RANDOM_PER_METHOD)):
                for _ in range(n):
                    if kind == "garbage":
                        raw = garbage(cls, rng)
                    else:
                        msg = cls()
                        fill(msg, rng)
                        raw = msg.SerializeToString()
                    code, details = call(channel, path, method, raw)
                    counts[f"{kind}:{code.name}"] += 1
                    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
                        bad.append(f"{path} {kind}: {code.name} {details!r} for {raw[:60]!r}")
                    elif kind == "garbage" and code != grpc.StatusCode.INVALID_ARGUMENT:
                        bad.append(f"{path} garbage: {code.name}, not INVALID_ARGUMENT, for {raw[:60]!r}")
                    if INTERNAL_TEXT.search(details):
                        bad.append(f"{path} {kind}: {code.name} details show internal text: {details!r}")
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        reply = pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["hello"]), timeout=10)
    services = sorted({p.split("/")[1] for p in by_method})
    with capsys.disabled():
        total = sum(sum(c.values()) for c in by_method.values())
        print(f"\nfuzz: {len(by_method)} methods of {len(services)} services, {total} calls")
        for path, counts in by_method.items():
            print(f"  {path}: {dict(sorted(counts.items()))}")
    assert proc.poll() is None, "the server died"
    assert bad == [], bad[:10]
    # Reflection found the services the server registers, not a subset.
    assert {"attnserve.v1.Transducer", "inference.GRPCInferenceService", "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection"} <= set(services)
    assert "/attnserve.v1.Transducer/TransduceText" in by_method  # the text call, named: reflection lists it
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert reply.results[0].output_tokens and reply.results[0].attention.rows >= len(reply.results[0].output_tokens)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
