"""Envoy's ext_proc v3 messages, built from descriptors shipped inside this package.

`extproc.binpb` is a `FileDescriptorSet`: the 18 `.proto` files that
`envoy/service/ext_proc/v3/external_processor.proto` needs (Envoy's API, xds, udpa and
protoc-gen-validate annotations), copied byte for byte out of the `xds-protos==1.85.0` wheel
by `infra/scripts/extproc_descriptors.py` (which `--check`s the copy). They are loaded into a
descriptor pool of our own, not protobuf's default one, so nothing here can clash with other
generated Envoy or OpenTelemetry modules in the same process, and no package of generated
modules has to be installed (docs/gateway.md, "Protocol version, and no Envoy here").
"""

from __future__ import annotations

from importlib import resources
from typing import Any

# The well-known types those files import: taken from the installed protobuf.
from google.protobuf import (  # noqa: F401  (imported so the default pool holds them)
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)

SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
PROCESS_METHOD = f"/{SERVICE}/Process"


def load_pool() -> descriptor_pool.DescriptorPool:
    """A fresh pool holding the shipped files and the well-known types they import."""
    data = resources.files("data_plane.gateway").joinpath("extproc.binpb").read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    pool = descriptor_pool.DescriptorPool()
    known = {f.name for f in files}
    for name in sorted({d for f in files for d in f.dependency} - known):
        proto = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
        pool.Add(proto)
    for proto in files:  # stored dependencies first
        pool.Add(proto)
    return pool


_POOL = load_pool()


def message(full_name: str) -> Any:
    """The message class for a fully qualified name, e.g. `envoy.type.v3.HttpStatus`."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


def service_methods() -> list[str]:
    """The ext_proc service's method names, as the shipped descriptors declare them."""
    return [m.name for m in _POOL.FindServiceByName(SERVICE).methods]


_EXT_PROC = "envoy.service.ext_proc.v3"
ProcessingRequest = message(f"{_EXT_PROC}.ProcessingRequest")
ProcessingResponse = message(f"{_EXT_PROC}.ProcessingResponse")
HeadersResponse = message(f"{_EXT_PROC}.HeadersResponse")
BodyResponse = message(f"{_EXT_PROC}.BodyResponse")
TrailersResponse = message(f"{_EXT_PROC}.TrailersResponse")
CommonResponse = message(f"{_EXT_PROC}.CommonResponse")
HeaderMutation = message(f"{_EXT_PROC}.HeaderMutation")
BodyMutation = message(f"{_EXT_PROC}.BodyMutation")
StreamedBodyResponse = message(f"{_EXT_PROC}.StreamedBodyResponse")
ImmediateResponse = message(f"{_EXT_PROC}.ImmediateResponse")
HttpHeaders = message(f"{_EXT_PROC}.HttpHeaders")
HttpBody = message(f"{_EXT_PROC}.HttpBody")
HttpTrailers = message(f"{_EXT_PROC}.HttpTrailers")
ProtocolConfiguration = message(f"{_EXT_PROC}.ProtocolConfiguration")
ProcessingMode = message("envoy.extensions.filters.http.ext_proc.v3.ProcessingMode")
HeaderValue = message("envoy.config.core.v3.HeaderValue")
HeaderValueOption = message("envoy.config.core.v3.HeaderValueOption")
HeaderMap = message("envoy.config.core.v3.HeaderMap")
HttpStatus = message("envoy.type.v3.HttpStatus")
