"""One typed configuration for every program of the project: frozen dataclasses whose fields carry their
documentation, read from flags (and, for the server, environment variables) by one set of parsers.

    @dataclass(frozen=True)
    class EngineConfig:
        max_output_len: int = setting(40, "hard cap on decoder steps per sequence")

`add_fields` gives each field a flag (`max_output_len` -> `--max-output-len`) whose --help shows the
field's documentation, its default and, where the program reads one, its environment variable.
`parse_value` turns the text of a flag or a variable into the field's type (bool, int, float, str, Path,
`X | None`, `list[X]`) and refuses a mistyped value the same way wherever it came from, naming where and what:

    --lexicon='ture' is not a boolean (true/false, yes/no, on/off, 1/0)
    ATTNSERVE_PORT='abc' is not an integer

Checks across fields stay in each dataclass's __post_init__, so a config is checked when it is built,
from flags or in code. Standard library only: training and the server both import it, and neither
imports the other for it.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def setting(default: Any = dataclasses.MISSING, doc: str = "", *, choices: tuple = (), switch: bool = False):
    """A dataclass field with its documentation (shown by --help). `choices`: the only values a str field
    takes. `switch`: a bool flag given without a value (`--keep-stress`), off unless given. No default: the
    flag is required."""
    if switch and default is not False:
        raise ValueError("a switch is off by default")
    return dataclasses.field(default=default, metadata={"doc": doc, "choices": tuple(choices), "switch": switch})


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def doc_of(f: dataclasses.Field) -> str:
    return f.metadata.get("doc", "")


def choices_of(f: dataclasses.Field) -> tuple:
    return f.metadata.get("choices", ())


def type_of(cls: type, f: dataclasses.Field) -> tuple[type, bool, bool]:
    """The field's type, whether it is `X | None` (then read as X, and the empty text as None) and whether it
    is `list[X]` (a flag given one or more values, each read as X)."""
    hint = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None)), True, False
    if typing.get_origin(hint) is list:
        return typing.get_args(hint)[0], False, True
    return hint, False, False


def parse_bool(raw: str) -> bool:
    """bool("false") is True: a flag or a variable spells a boolean out, and anything else is refused."""
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ValueError("is not a boolean (true/false, yes/no, on/off, 1/0)")


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("is not an integer") from None


def _parse_float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError("is not a number") from None


PARSERS = {bool: parse_bool, int: _parse_int, float: _parse_float, str: str, Path: Path}


def parse_value(cls: type, f: dataclasses.Field, raw: str, where: str):
    """The text `raw` of field `f` of `cls`, given at `where` (a flag or an environment variable), as the
    field's type; a ValueError naming `where` and `raw` when it is not one."""
    kind, optional, _ = type_of(cls, f)
    if optional and raw == "":
        return None
    try:
        value = PARSERS[kind](raw)
        if choices_of(f) and value not in choices_of(f):
            raise ValueError(f"is not one of {', '.join(map(str, choices_of(f)))}")
    except ValueError as e:
        raise ValueError(f"{where}={raw!r} {e}") from None
    return value


def _metavar(cls: type, f: dataclasses.Field) -> str:
    kind, _, _ = type_of(cls, f)
    if choices_of(f):
        return "{" + ",".join(map(str, choices_of(f))) + "}"
    return "{true,false}" if kind is bool else {int: "INT", float: "NUMBER", Path: "PATH"}.get(kind, "TEXT")


def _shown(default) -> str:
    """A default as one would type it: true/false, "" for the empty text."""
    return str(default).lower() if isinstance(default, bool) else str(default) or '""'


def add_fields(parser, cls: type, *, env_prefix: str = "", dest_prefix: str = "", skip: tuple = ()) -> None:
    """A flag per field of `cls` (but those in `skip`) on `parser` (a parser or an argument group), its help
    the field's documentation, default and variable (`env_prefix` + NAME, where given). A flag's value is
    kept as its text, under dest `dest_prefix` + name, and only where given: `values` parses it."""
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        notes = [f"env {env_prefix}{f.name.upper()}"] if env_prefix else []
        if f.default not in (dataclasses.MISSING, None) and not f.metadata.get("switch"):
            notes.append(f"default {_shown(f.default)}")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        help = " ".join(filter(None, [doc_of(f), f"[{', '.join(notes)}]" if notes else ""])).replace("%", "%%")
        many = type_of(cls, f)[2]
        kwargs = ({"action": "store_true"} if f.metadata.get("switch")
                  else {"metavar": _metavar(cls, f), "required": required, "nargs": "+" if many else None})
        parser.add_argument(flag_of(f.name), dest=dest_prefix + f.name, default=argparse.SUPPRESS, help=help,
                            **kwargs)


def values(cls: type, given: dict[str, Any], *, dest_prefix: str = "", environ: dict[str, str] | None = None,
           env_prefix: str = "", skip: tuple = ()) -> dict[str, Any]:
    """The keyword arguments of `cls` from `given` (an argparse namespace's vars, as `add_fields` left them),
    then from `environ`'s `env_prefix` + NAME variables where given, parsed; fields set nowhere are left to
    their defaults. A mistyped value: a ValueError naming its flag or variable."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        raw = given.get(dest_prefix + f.name)
        if isinstance(raw, list):
            out[f.name] = [parse_value(cls, f, one, flag_of(f.name)) for one in raw]
        elif raw is not None:
            out[f.name] = parse_value(cls, f, raw, flag_of(f.name)) if isinstance(raw, str) else raw
        elif environ is not None and env_prefix and (env := environ.get(env_prefix + f.name.upper())) is not None:
            out[f.name] = parse_value(cls, f, env, env_prefix + f.name.upper())
    return out


def parse(cls: type, argv: list[str] | None = None, **parser_kwargs):
    """A program whose flags are the fields of `cls` alone: `cls` built from `argv`, or refused (exit 2)."""
    parser = ArgumentParser(**parser_kwargs)
    add_fields(parser, cls)
    given = vars(parser.parse_args(argv))
    try:
        return cls(**values(cls, given))
    except ValueError as e:
        parser.error(str(e))


class Refused(SystemExit):
    """A configuration refused: exits with argparse's status 2 (usage and message already on stderr), and
    reads as its message, so that a caller catching it can tell which flag or variable was wrong."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ArgumentParser(argparse.ArgumentParser):
    """argparse's, but a refusal raises Refused (still exit status 2, usage and message on stderr)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self._print_message(f"{self.prog}: error: {message}\n", sys.stderr)
        raise Refused(message)
