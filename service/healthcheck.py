"""Exit 0 when the server's gRPC health service says SERVING (for container HEALTHCHECKs).

    python -m service.healthcheck --addr localhost:50051 [--service attnserve.v1.Transducer]
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", default="localhost:50051")
    p.add_argument("--service", default="")
    p.add_argument("--timeout-s", type=float, default=3.0)
    args = p.parse_args(argv)
    with grpc.insecure_channel(args.addr) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout_s)
        except grpc.RpcError as e:
            print(f"unhealthy: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
