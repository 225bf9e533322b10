"""How one client channel spreads its calls over several replicas and rides out one going away.

For a target that resolves to many addresses (`dns:///attnserve-headless.<ns>.svc.cluster.local:50051`
on Kubernetes, or `ipv4:127.0.0.1:50051,127.0.0.1:50052`), the service config below makes gRPC:
- open a connection to every address and pick one per call (`round_robin`);
- watch each replica's health (grpc.health.v1 Watch on ""), so a replica that says NOT_SERVING
  (the server's lame duck after SIGTERM) gets no new calls while it finishes the ones it has;
- retry a call that failed UNAVAILABLE (a replica that stopped, a connection closed by GOAWAY)
  on another replica, with backoff. Only UNAVAILABLE: the server answered nothing, so a retry
  cannot run a request twice. Never RESOURCE_EXHAUSTED: an overloaded server said so at once
  (service/scheduling/admission.py), and retrying would only add load;
- throttle retries when most calls fail (`retryThrottling`, gRPC's form of the SRE book's
  client-side adaptive throttling): retries stop while failures outnumber successes.
The server's maximum connection age (`--max-connection-age-s`) closes connections now and then,
so long-lived clients re-resolve DNS and find new replicas.

Kept free of the server's modules so that the CLI client and examples import it cheaply.
"""
from __future__ import annotations

import json

SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    # Each failure takes a token, each success gives back 0.1; below half of maxTokens, no retries.
    "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
    "methodConfig": [{
        "name": [{}],  # every method of every service
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.05s",
            "maxBackoff": "1s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }],
}


def channel_options() -> list[tuple[str, object]]:
    """Channel arguments for a client of several replicas (harmless for a single server)."""
    return [("grpc.service_config", json.dumps(SERVICE_CONFIG)), ("grpc.enable_retries", 1)]
