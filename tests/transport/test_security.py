"""TLS, mutual TLS and the bearer token, with real servers on loopback and certificates made here."""
import asyncio
import logging

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg
from service.client import client
from service.config import Config, ServerConfig
from service.transport.security import TOKEN_ENV, SecurityError, channel_credentials, load_auth_token
from service.server import build_server
from tests.live import make_pki, start_loaded

TOKEN = "s3cret-token-0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


async def started(model_dir, **server):
    return await start_loaded(Config(model_dir=model_dir, server=ServerConfig(host="127.0.0.1", port=0,
                                                                             metrics_port=-1, **server)))


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def tls_server(tiny_bundle, pki):
    s = await started(tiny_bundle, tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)
    yield s
    await s.stop(0)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def mtls_server(tiny_bundle, pki, token_file):
    s = await started(tiny_bundle, tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
                      tls_client_ca_file=pki.ca, auth_token_file=token_file)
    yield s
    await s.stop(0)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def token_server(tiny_bundle, token_file):
    s = await started(tiny_bundle, auth_token_file=token_file)
    yield s
    await s.stop(0)


async def transduce(address, creds=None, metadata=None, timeout=10):
    channel = grpc.aio.insecure_channel(address) if creds is None else grpc.aio.secure_channel(address, creds)
    async with channel:
        return await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["secure"]), timeout=timeout,
                                                           metadata=metadata)


async def code_of(coro) -> grpc.StatusCode:
    try:
        await coro
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK


async def test_tls_serves_clients_that_trust_its_ca_only(tls_server, pki):
    address = f"127.0.0.1:{tls_server.port}"
    reply = await transduce(address, channel_credentials(tls_ca_file=pki.ca))
    assert reply.results[0].attention.cols == len("secure")
    assert await code_of(transduce(address, timeout=3)) == grpc.StatusCode.UNAVAILABLE  # plaintext
    # A client that trusts another CA rejects the server's certificate.
    other = grpc.ssl_channel_credentials(root_certificates=open(pki.rogue_cert, "rb").read())
    assert await code_of(transduce(address, other, timeout=3)) == grpc.StatusCode.UNAVAILABLE


async def test_healthcheck_cli_speaks_tls(tls_server, pki):
    from service.client import healthcheck

    address = f"127.0.0.1:{tls_server.port}"
    assert await asyncio.to_thread(healthcheck.main, ["--addr", address, "--tls-ca-file", pki.ca]) == 0
    assert await asyncio.to_thread(healthcheck.main, ["--addr", address, "--timeout-s", "2"]) == 1  # plaintext


async def test_mutual_tls_needs_a_client_certificate_from_the_ca(mtls_server, pki):
    address = f"127.0.0.1:{mtls_server.port}"
    good = channel_credentials(pki.ca, pki.client_cert, pki.client_key, TOKEN)
    assert len((await transduce(address, good)).results) == 1
    no_cert = channel_credentials(tls_ca_file=pki.ca, token=TOKEN)
    rogue = channel_credentials(pki.ca, pki.rogue_cert, pki.rogue_key, TOKEN)
    for creds in (no_cert, rogue):
        assert await code_of(transduce(address, creds, timeout=3)) == grpc.StatusCode.UNAVAILABLE
    # The token is checked on top of the certificate.
    assert await code_of(transduce(address, channel_credentials(pki.ca, pki.client_cert, pki.client_key))) \
        == grpc.StatusCode.UNAUTHENTICATED


async def test_bearer_token_is_required_except_for_health(token_server, caplog):
    caplog.set_level(logging.DEBUG)
    address = f"127.0.0.1:{token_server.port}"
    before = token_server.metrics.auth_failures._value.get()
    assert await code_of(transduce(address)) == grpc.StatusCode.UNAUTHENTICATED
    wrong = (("authorization", "Bearer " + TOKEN[:-1] + "X"),)
    assert await code_of(transduce(address, metadata=wrong)) == grpc.StatusCode.UNAUTHENTICATED
    assert await code_of(transduce(address, metadata=(("authorization", TOKEN),))) == grpc.StatusCode.UNAUTHENTICATED
    right = (("authorization", "Bearer " + TOKEN),)
    assert len((await transduce(address, metadata=right)).results) == 1
    # Without TLS the client helper sends the token over a local (loopback) connection only.
    assert len((await transduce(address, channel_credentials(token=TOKEN))).results) == 1
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING  # probes need no token
        stub = pbg.TransducerStub(channel)
        assert await code_of(stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)) == grpc.StatusCode.UNAUTHENTICATED
        assert await code_of(stub.ReloadModel(pb.ReloadModelRequest(), timeout=5)) == grpc.StatusCode.UNAUTHENTICATED
        # No request is written: grpc-python's asyncio client can report a write that meets the
        # server's early status as INTERNAL instead of that status (grpc/grpc#36066), a race.
        stream = stub.TransduceStream(timeout=5)
        assert await code_of(stream.read()) == grpc.StatusCode.UNAUTHENTICATED
        unknown = channel.unary_unary("/attnserve.v1.Transducer/NoSuchMethod")
        assert await code_of(unknown(b"", timeout=5)) == grpc.StatusCode.UNAUTHENTICATED  # no probing either
    assert token_server.metrics.auth_failures._value.get() - before == 7
    assert not any(TOKEN in r.getMessage() for r in caplog.records), "the token must never be logged"


async def test_cli_client_connects_with_mutual_tls_and_token(mtls_server, pki, capsys):
    args = ["info", "--json", "--server", f"127.0.0.1:{mtls_server.port}", "--tls-ca-file", pki.ca,
            "--tls-cert-file", pki.client_cert, "--tls-key-file", pki.client_key]
    assert await asyncio.to_thread(client.main, args + ["--token", TOKEN]) == 0
    assert '"name": "tiny"' in capsys.readouterr().out
    assert await asyncio.to_thread(client.main, args + ["--token", "nope"]) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err


def test_token_from_the_environment_and_bad_settings(tmp_path, token_file):
    cfg = ServerConfig()
    assert load_auth_token(cfg, {}) is None
    assert load_auth_token(cfg, {TOKEN_ENV: f" {TOKEN} "}) == TOKEN.encode()
    assert load_auth_token(ServerConfig(auth_token_file=token_file), {}) == TOKEN.encode()
    with pytest.raises(SecurityError, match="both auth_token_file .* and ATTNSERVE_AUTH_TOKEN"):
        load_auth_token(ServerConfig(auth_token_file=token_file), {TOKEN_ENV: TOKEN})
    with pytest.raises(SecurityError, match="ATTNSERVE_AUTH_TOKEN holds an empty token"):
        load_auth_token(cfg, {TOKEN_ENV: "  "})
    with pytest.raises(ValueError, match=r"tls_cert_file \('/c.pem'\) and tls_key_file \(''\) go together"):
        ServerConfig(tls_cert_file="/c.pem")
    with pytest.raises(ValueError, match="tls_client_ca_file .* needs tls_cert_file"):
        ServerConfig(tls_client_ca_file=token_file)
    with pytest.raises(ValueError, match=f"tls_key_file '{tmp_path}/missing.key' is not a file"):
        ServerConfig(tls_cert_file=token_file, tls_key_file=str(tmp_path / "missing.key"))
    with pytest.raises(SecurityError, match="--tls-cert-file and --tls-key-file go together"):
        channel_credentials(tls_cert_file=token_file)


def test_unusable_pem_files_stop_the_server_with_their_names(pki, token_file, tiny_bundle):
    def build(**server):
        return build_server(Config(model_dir=tiny_bundle, server=ServerConfig(metrics_port=-1, **server)))

    with pytest.raises(SecurityError, match=f"tls_cert_file '{token_file}' and tls_key_file .* are not a PEM"):
        build(tls_cert_file=token_file, tls_key_file=pki.server_key)
    with pytest.raises(SecurityError, match="are not a PEM certificate chain and its private key"):
        build(tls_cert_file=pki.server_cert, tls_key_file=pki.client_key)  # a key of another certificate
    with pytest.raises(SecurityError, match=f"tls_client_ca_file '{token_file}' is not a PEM CA"):
        build(tls_cert_file=pki.server_cert, tls_key_file=pki.server_key, tls_client_ca_file=token_file)


async def test_admin_calls_are_closed_unless_a_token_or_the_flag_opens_them(tiny_bundle, token_server):
    """Every admin method (security.ADMIN_METHODS): PERMISSION_DENIED on a server with neither a token nor
    --admin-without-token; with a token, the token opens them; the flag opens them on a trusted network."""
    from service.transport.security import ADMIN_METHODS

    async def codes(address, metadata=None) -> dict[str, tuple[grpc.StatusCode, str]]:
        out = {}
        async with grpc.aio.insecure_channel(address) as channel:
            for method in ADMIN_METHODS:  # empty messages: reload the served version, load/unload model ""
                try:
                    await channel.unary_unary(method)(b"", timeout=30, metadata=metadata)
                    out[method] = (grpc.StatusCode.OK, "")
                except grpc.aio.AioRpcError as e:
                    out[method] = (e.code(), e.details())
        return out

    closed = await started(tiny_bundle)
    opened = await started(tiny_bundle, admin_without_token=True)
    try:
        refused = await codes(f"127.0.0.1:{closed.port}")
        open_codes = await codes(f"127.0.0.1:{opened.port}")
        with_token = await codes(f"127.0.0.1:{token_server.port}", (("authorization", "Bearer " + TOKEN),))
        without_token = await codes(f"127.0.0.1:{token_server.port}")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{closed.port}") as channel:  # the data plane stays open
            assert len((await pbg.TransducerStub(channel).Transduce(pb.TransduceRequest(inputs=["a"]),
                                                                    timeout=10)).results) == 1
    finally:
        await closed.stop(0)
        await opened.stop(0)
    assert all(code == grpc.StatusCode.PERMISSION_DENIED and "--admin-without-token" in details
               for code, details in refused.values()), refused
    denied = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
    assert all(code not in denied for code, _ in [*open_codes.values(), *with_token.values()]), (open_codes, with_token)
    assert open_codes["/attnserve.v1.Transducer/ReloadModel"][0] == grpc.StatusCode.OK
    assert all(code == grpc.StatusCode.UNAUTHENTICATED for code, _ in without_token.values())


def test_the_admin_flag_reads_booleans_from_flags_and_environment():
    from service.config import parse_config

    assert parse_config([], {}).server.admin_without_token is False
    assert parse_config([], {"ATTNSERVE_ADMIN_WITHOUT_TOKEN": "false"}).server.admin_without_token is False
    assert parse_config([], {"ATTNSERVE_ADMIN_WITHOUT_TOKEN": "true"}).server.admin_without_token is True
    assert parse_config(["--admin-without-token", "yes"], {}).server.admin_without_token is True
    with pytest.raises(SystemExit, match="ATTNSERVE_ADMIN_WITHOUT_TOKEN='maybe'"):
        parse_config([], {"ATTNSERVE_ADMIN_WITHOUT_TOKEN": "maybe"})
