"""The gRPC floor: a trivial echo RPC on the same stack (grpc.aio, Python) as attnserve.

    python -m bench.echo --port 50070
"""
from __future__ import annotations

import argparse
import asyncio

import grpc


async def serve(port: int) -> None:
    async def echo(request: bytes, context) -> bytes:
        return request

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("attnserve.bench.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, required=True)
    asyncio.run(serve(p.parse_args(argv).port))


if __name__ == "__main__":
    main()
