"""Write (or `--check`) `data_plane/gateway/extproc.binpb`: the descriptors of Envoy's ext_proc
v3 service and every file it imports, copied out of a pinned `xds-protos` wheel.

    python infra/scripts/extproc_descriptors.py            # rewrite the shipped file
    python infra/scripts/extproc_descriptors.py --check    # exit 1 if it differs

The wheel is fetched with `pip download --no-deps` and read as a zip: its `_pb2.py` modules are
parsed (never imported or installed), and each one's `AddSerializedFile(b"...")` literal is the
file's serialized `FileDescriptorProto`. Why not depend on `xds-protos` itself: it installs its
own, older `opentelemetry/proto/*` over the `opentelemetry-proto` package the OTLP exporter
needs (and `google/api`, `google/rpc` over googleapis-common-protos), which broke a plain
`pip install` (docs/gateway.md, "Protocol version, and no Envoy here").
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from google.protobuf import descriptor_pb2

XDS_PROTOS = "xds-protos==1.85.0"
ROOT = "envoy/service/ext_proc/v3/external_processor.proto"
TARGET = Path(__file__).resolve().parents[2] / "data_plane" / "gateway" / "extproc.binpb"


def serialized_file(wheel: zipfile.ZipFile, proto_name: str) -> bytes:
    """The serialized FileDescriptorProto a generated `_pb2.py` module registers."""
    source = wheel.read(proto_name.removesuffix(".proto") + "_pb2.py").decode()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise LookupError(f"{proto_name}: no AddSerializedFile call in its module")


def descriptor_set(wheel: zipfile.ZipFile) -> bytes:
    """ROOT and its imports, dependencies first; protobuf's well-known types left out (the
    installed protobuf provides them)."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name.startswith("google/protobuf/"):
            return
        seen.add(name)
        proto = descriptor_pb2.FileDescriptorProto.FromString(serialized_file(wheel, name))
        for dependency in proto.dependency:
            visit(dependency)
        ordered.append(proto)

    visit(ROOT)
    return descriptor_pb2.FileDescriptorSet(file=ordered).SerializeToString(deterministic=True)


def download_wheel(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "--dest", str(into), XDS_PROTOS],
        check=True,
    )  # fmt: skip
    (wheel,) = into.glob("xds_protos-*.whl")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--wheel", type=Path, help="an xds-protos wheel already on disk")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.wheel or download_wheel(Path(tmp))
        with zipfile.ZipFile(path) as wheel:
            data = descriptor_set(wheel)
    if not args.check:
        TARGET.write_bytes(data)
        return 0
    if TARGET.read_bytes() != data:
        print(f"{TARGET} differs from the descriptors in {XDS_PROTOS}", file=sys.stderr)
        return 1
    print(f"{TARGET.name}: the descriptors of {XDS_PROTOS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
