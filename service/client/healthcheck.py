"""Exit 0 when the server's gRPC health service says SERVING (for container HEALTHCHECKs).

    python -m service.client.healthcheck --addr localhost:50051 [--service attnserve.v1.Transducer]
        [--tls-ca-file ca.pem [--tls-cert-file client.pem --tls-key-file client.key]]

Health needs no bearer token; a TLS server needs the TLS flags (a client certificate for mutual TLS).
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.transport.security import channel_credentials


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", default="localhost:50051")
    p.add_argument("--service", default="")
    p.add_argument("--timeout-s", type=float, default=3.0)
    p.add_argument("--tls-ca-file", default="", help="connect with TLS, trusting this CA")
    p.add_argument("--tls-cert-file", default="", help="client certificate (mutual TLS)")
    p.add_argument("--tls-key-file", default="", help="the client certificate's key")
    args = p.parse_args(argv)
    creds = channel_credentials(args.tls_ca_file, args.tls_cert_file, args.tls_key_file)
    with (grpc.insecure_channel(args.addr) if creds is None else grpc.secure_channel(args.addr, creds)) as channel:
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
