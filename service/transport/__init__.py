"""Transport: the gRPC handlers (native API, Open Inference Protocol, admin), the gate every call
passes (guard, security) and the one module that turns protobuf messages into domain values
(convert). The only layer that imports grpc or the generated protobuf modules."""
