"""The one build step beyond setuptools' own (everything else is declared in pyproject.toml): the gRPC
modules attnserve.v1 and attnserve.inference, generated from protos/ by grpcio-tools (a build
requirement), so that `pip install .` ships them without a `make protos` first.

protoc runs with protos/ as its root, so a file's path there is its module's path in the package
(protos/attnserve/inference/grpc_service.proto -> attnserve.inference.grpc_service_pb2), while the
proto `package` (attnserve.v1, inference) alone names what goes over the wire.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build import build

PROTO_ROOT = "protos"
PROTOS = ("attnserve/v1/attnserve.proto", "attnserve/inference/grpc_service.proto")
# What protoc writes for each proto, beside the package's __init__.py.
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generated(proto: str) -> list[str]:
    """The files one proto becomes, relative to the root of the package tree."""
    stem = proto.removesuffix(".proto")
    return [stem + s for s in SUFFIXES] + [str(Path(proto).parent / "__init__.py")]


class build_protos(Command):
    """protoc over PROTOS: into the build directory, or in place (the source tree) for an editable
    install, whose modules are imported from there (setuptools' build SubCommand protocol)."""

    description = "generate attnserve.v1 and attnserve.inference from protos/ (grpcio-tools)"
    user_options = []

    def initialize_options(self) -> None:
        self.build_lib = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _out(self) -> Path:
        return Path(".") if self.editable_mode else Path(self.build_lib)

    def run(self) -> None:
        from grpc_tools import protoc  # a build requirement, absent when this file is merely read

        out = self._out()
        for proto in PROTOS:
            (out / proto).parent.mkdir(parents=True, exist_ok=True)
        argv = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *(f"{PROTO_ROOT}/{p}" for p in PROTOS)]
        if protoc.main(argv) != 0:
            raise RuntimeError(f"protoc failed: {' '.join(argv)}")
        for proto in PROTOS:
            (out / proto).parent.joinpath("__init__.py").touch()

    def get_source_files(self) -> list[str]:
        return [f"{PROTO_ROOT}/{p}" for p in PROTOS]

    def get_outputs(self) -> list[str]:
        return [str(Path(self.build_lib) / f) for p in PROTOS for f in generated(p)]

    def get_output_mapping(self) -> dict[str, str]:
        if not (self.editable_mode):
            return {}  # written straight into the build directory: no source file stands behind them
        return {str(Path(self.build_lib) / f): f for p in PROTOS for f in generated(p)}


class build_with_protos(build):
    # After build_py, so that modules a `make protos` left in the source tree are overwritten by fresh ones.
    sub_commands = [*build.sub_commands, ("build_protos", None)]


setup(cmdclass={"build": build_with_protos, "build_protos": build_protos})
