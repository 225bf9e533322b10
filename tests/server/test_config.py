"""Configuration from flags and ATTNSERVE_* environment variables."""
from pathlib import Path

import pytest

from service.config import EngineConfig, ServerConfig, parse_config, worker_core


def test_defaults_work():
    cfg = parse_config([], {})
    assert cfg.server.port == 50051 and cfg.model_repository == Path("models") and cfg.model_dir is None
    # --model-dir serves one model instead; a --model-repository flag wins over ATTNSERVE_MODEL_DIR.
    assert parse_config(["--model-dir", "models/g2p-en"], {}).model_dir == Path("models/g2p-en")
    cfg = parse_config(["--model-repository", "/r", "--default-model", "b"], {"ATTNSERVE_MODEL_DIR": "/m"})
    assert (cfg.model_repository, cfg.model_dir, cfg.default_model) == (Path("/r"), None, "b")
    with pytest.raises(SystemExit):
        parse_config(["--model-repository", "/r", "--model-dir", "/m"], {})


def test_environment_then_flags():
    env = {"ATTNSERVE_PORT": "6000", "ATTNSERVE_MAX_WAIT_MS": "9", "ATTNSERVE_MODEL_DIR": "/m"}
    cfg = parse_config(["--max-wait-ms", "3.5"], env)
    assert cfg.server.port == 6000
    assert cfg.batcher.max_wait_ms == 3.5  # the flag wins
    assert cfg.model_dir == Path("/m")


def test_bad_values_name_the_field(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--max-batch-size", "0"], {})
    assert "max_batch_size must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="ATTNSERVE_PORT='abc'"):
        parse_config([], {"ATTNSERVE_PORT": "abc"})
    with pytest.raises(ValueError, match="port must be in 0..65535, got 70000"):
        ServerConfig(port=70000)
    with pytest.raises(ValueError, match="max_output_len"):
        EngineConfig(max_output_len=0)


def test_model_version_poll_and_security_settings_are_flags_and_env(tmp_path):
    from service.config import RepositoryConfig

    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    env = {"ATTNSERVE_MODEL_POLL_S": "2.5", "ATTNSERVE_TLS_KEY_FILE": str(cert)}
    cfg = parse_config(["--model-version", "3", "--tls-cert-file", str(cert)], env)
    assert cfg.repository == RepositoryConfig(model_version="3", model_poll_s=2.5)
    assert cfg.server.tls_cert_file == cfg.server.tls_key_file == str(cert)
    with pytest.raises(ValueError, match="model_version must be a version directory name .* got '../x'"):
        RepositoryConfig(model_version="../x")
    with pytest.raises(ValueError, match="model_poll_s must be >= 0 .* got -1"):
        RepositoryConfig(model_poll_s=-1)


def test_edge_settings_are_checked_and_reach_grpc():
    from service.config import BatcherConfig
    from service.server import grpc_options

    cfg = parse_config(["--lame-duck-s", "0.5", "--max-connection-age-s", "60"],
                       {"ATTNSERVE_MAX_PENDING_CALLS": "32", "ATTNSERVE_MAX_QUEUE_WAIT_MS": "250"})
    assert cfg.server.lame_duck_s == 0.5 and cfg.batcher.max_queue_wait_ms == 250
    options = dict(grpc_options(cfg.server))
    assert options["grpc.max_connection_age_ms"] == 60_000 and options["grpc.server.max_pending_requests"] == 32
    assert options["grpc.server.max_pending_requests_hard_limit"] == cfg.server.max_pending_calls_hard
    assert options["grpc.max_concurrent_streams"] == cfg.server.max_streams_per_connection
    assert "grpc.max_connection_age_ms" not in dict(grpc_options(ServerConfig(max_connection_age_s=0)))
    assert "grpc.max_concurrent_streams" not in dict(grpc_options(ServerConfig(max_streams_per_connection=0)))
    for bad, match in (({"lame_duck_s": -1}, "lame_duck_s must be >= 0, got -1"),
                       ({"grace_period_s": float("nan")}, "grace_period_s must be >= 0, got nan"),
                       ({"max_pending_calls": 200000}, r"max_pending_calls \(200000\) must be in 0..max_pending_calls_hard"),
                       ({"max_streams_per_connection": -1}, "max_streams_per_connection must be >= 0"),
                       ({"max_inflight_calls": 0}, "max_inflight_calls must be >= 1, got 0")):
        with pytest.raises(ValueError, match=match):
            ServerConfig(**bad)
    with pytest.raises(ValueError, match="max_queue_wait_ms must be >= 0"):
        BatcherConfig(max_queue_wait_ms=-5)
    with pytest.raises(ValueError, match="model_version must be a version directory name"):
        from service.config import RepositoryConfig
        RepositoryConfig(model_version="²")  # str.isdigit() says yes; int() says no


def test_a_worker_runs_on_its_own_core_only_where_the_cores_are_its_own():
    assert [worker_core(i, 2, cores=[4, 5], usable=2) for i in range(2)] == [4, 5]
    assert worker_core(1, 2, cores=list(range(64)), usable=2) == -1  # a quota on a shared node: no core is its own
    assert worker_core(0, 3, cores=[0, 1], usable=2) == -1  # more workers than cores
    assert worker_core(0, 1, cores=[0, 1], usable=2) == -1  # one process on two cores


def refusal(parse, argv, capsys) -> str:
    """What a parser says when it refuses `argv`: exit status 2 (argparse's), and the message it exits with
    is the one it prints."""
    with pytest.raises(SystemExit) as refused:
        parse(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {refused.value}" in err, err
    return str(refused.value)


def test_a_mistyped_value_is_refused_the_same_way_by_the_server_and_by_training(capsys):
    from training.train import parse_args

    train = ["--corpus", "tsv", "--tsv", "x.tsv", "--out", "run"]
    server = lambda argv: parse_config(argv, {})  # noqa: E731
    boolean = "is not a boolean (true/false, yes/no, on/off, 1/0)"
    assert refusal(server, ["--lexicon", "ture"], capsys) == f"--lexicon='ture' {boolean}"
    assert refusal(parse_args, [*train, "--save-last", "ture"], capsys) == f"--save-last='ture' {boolean}"
    assert refusal(lambda a: parse_config(a, {"ATTNSERVE_LEXICON": "ture"}), [], capsys) == (
        f"ATTNSERVE_LEXICON='ture' {boolean}")
    assert refusal(server, ["--max-batch-size", "2.5"], capsys) == "--max-batch-size='2.5' is not an integer"
    assert refusal(parse_args, [*train, "--batch-size", "2.5"], capsys) == "--batch-size='2.5' is not an integer"
    assert refusal(server, ["--max-wait-ms", "soon"], capsys) == "--max-wait-ms='soon' is not a number"
    assert refusal(parse_args, [*train, "--lr", "fast"], capsys) == "--lr='fast' is not a number"
    assert refusal(server, ["--mode", "eager"], capsys) == "--mode='eager' is not one of auto, continuous, request"
    assert refusal(parse_args, [*train, "--cell", "gpt"], capsys) == "--cell='gpt' is not one of rnn, gru, lstm"
    # and a value of the right type that its config refuses, checked when built
    assert refusal(server, ["--max-batch-size", "0"], capsys) == "max_batch_size must be >= 1, got 0"
    assert refusal(parse_args, [*train, "--hidden-size", "7"], capsys) == (
        "hidden_size must be even for a bidirectional encoder, got 7")
    assert refusal(parse_args, [*train, "--max-epochs", "0"], capsys) == "max_epochs must be >= 1, got 0"
    # the other training programs read their flags the same way
    evaluate, _ = programs("evaluate")
    assert refusal(evaluate, ["--bundle", "b", "--batch", "ten"], capsys) == "--batch='ten' is not an integer"
    assert refusal(evaluate, ["--bundle", "b", "--split", "val"], capsys) == (
        "--split='val' is not one of train, dev, test")


def test_booleans_are_spelled_out_alike_everywhere():
    from training.train import parse_args

    train = ["--corpus", "tsv", "--tsv", "x.tsv", "--out", "run"]
    for raw, value in (("true", True), ("Yes", True), ("on", True), ("1", True),
                       ("false", False), ("NO", False), ("off", False), ("0", False)):
        assert parse_config(["--lexicon", raw], {}).answering.lexicon is value
        assert parse_config([], {"ATTNSERVE_LENGTH_GROUPING": raw}).batcher.length_grouping is value
        assert parse_args([*train, "--bidirectional", raw]).bidirectional is value
    assert parse_args(train).keep_stress is False and parse_args([*train, "--keep-stress"]).keep_stress is True


def programs(name: str):
    """A program's parser (a function of argv) and the config classes whose fields are its flags."""
    import importlib

    from service.config import SECTIONS, Config

    if name == "server":
        return (lambda a: parse_config(a, {})), [Config, *SECTIONS.values()]
    if name == "train":
        from training.model import ModelConfig
        from training.train import RunConfig, TrainConfig, parse_args
        return parse_args, [RunConfig, ModelConfig, TrainConfig]
    module = importlib.import_module(f"training.{name}")
    cls = {"evaluate": "EvalConfig", "export": "ExportConfig", "quantize": "QuantizeConfig",
           "distill": "DistillConfig"}[name]
    return module.main, [getattr(module, cls)]


@pytest.mark.parametrize("program", ["server", "train", "evaluate", "export", "quantize", "distill"])
def test_help_shows_every_fields_documentation(program, capsys):
    from dataclasses import fields

    from attnserve.config import doc_of, flag_of
    from service.config import SECTIONS

    parse, classes = programs(program)
    with pytest.raises(SystemExit):
        parse(["--help"])
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps the lines, also after a hyphen
    for cls in classes:
        for f in fields(cls):
            if f.name in SECTIONS or f.name.endswith("vocab_size"):
                continue
            assert doc_of(f), f"{cls.__name__}.{f.name} has no documentation"
            assert flag_of(f.name) in shown and "".join(doc_of(f).split()) in shown, f.name
    if program == "server":
        assert "[envATTNSERVE_MAX_WAIT_MS,default0.0]" in shown
    if program == "train":
        assert "[default256]" in shown  # --batch-size


def test_the_config_helper_is_the_standard_library_only():
    """Training and the server both read flags through attnserve/config.py: it imports neither of them."""
    import ast

    import attnserve.config

    tree = ast.parse(Path(attnserve.config.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "argparse", "dataclasses", "sys", "types", "typing", "pathlib"}, names
