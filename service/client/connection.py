"""How attnserve-client reaches a server: the connection flags every subcommand shares, the channel, and
each call's keyword arguments. Its own module so that the subcommands' modules (client.py, text.py) import
it and not each other."""
from __future__ import annotations

import argparse
import os

import grpc

from service.client.balancing import channel_options
from service.transport.security import channel_credentials

DEFAULT_SERVER = "localhost:50051"


def checked(kind, ok, what):
    def parse(s: str):
        v = kind(s)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {what}, got {s}")
        return v
    return parse


def add_connection_args(p: argparse.ArgumentParser) -> None:
    """Where and how to reach the server: every subcommand gets these (TLS and auth flags belong here too)."""
    g = p.add_argument_group("connection")
    # Read at call time, not import time, so the environment of each run counts.
    g.add_argument("--server", default=os.environ.get("ATTNSERVE_SERVER") or DEFAULT_SERVER,
                   help="host:port of the server, or a gRPC target with several replicas, e.g. "
                        "dns:///attnserve-headless.default.svc.cluster.local:50051 "
                        "(default: $ATTNSERVE_SERVER or %(default)s)")
    g.add_argument("--timeout-s", type=checked(float, lambda v: v > 0, "> 0"), default=10.0,
                   help="deadline of each RPC (default: %(default)s)")
    g.add_argument("--tls-ca-file", default="", metavar="PEM",
                   help="connect with TLS, trusting this CA (TLS with the system roots: give only --tls-cert-file)")
    g.add_argument("--tls-cert-file", default="", metavar="PEM", help="client certificate for mutual TLS")
    g.add_argument("--tls-key-file", default="", metavar="PEM", help="the client certificate's private key")
    # The environment is the better place for a secret: command lines show in `ps`.
    g.add_argument("--token", default=os.environ.get("ATTNSERVE_AUTH_TOKEN", ""),
                   help="bearer token the server asks for (default: $ATTNSERVE_AUTH_TOKEN); without TLS it is "
                        "only sent to a server on this machine")


def open_channel(args) -> grpc.Channel:
    """The CLI's channel, from its connection flags."""
    return make_channel(args.server, args.tls_ca_file, args.tls_cert_file, args.tls_key_file, args.token)


def make_channel(target: str, ca_file: str = "", cert_file: str = "", key_file: str = "", token: str = "") -> grpc.Channel:
    """The one place a client (the CLI, phonemize()) makes its channel."""
    creds = channel_credentials(ca_file, cert_file, key_file, token)
    # Round robin over every address the target resolves to, with health checks and retries on
    # UNAVAILABLE (service/client/balancing.py): `--server dns:///attnserve-headless...:50051` spreads calls.
    options = channel_options()
    if creds is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, creds, options=options)


def rpc_kwargs(args) -> dict:
    """Keyword arguments of every RPC the CLI makes (the deadline; per-call metadata would go here)."""
    return {"timeout": args.timeout_s}
