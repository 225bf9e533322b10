"""The admin RPC attnserve.v1.Transducer/ReloadModel -> the model's manager in the repository.

Registered as its own generic handler beside the Transducer's data-plane methods, so
the admin surface stays in one small place. It can only choose a version directory
inside the model's directory, never a path. Triton's RepositoryModelLoad/Unload
(service/transport/kserve.py) follow the same rule. Who may call it is the security layer's to decide
(service/transport/security.py: the bearer token, or AdminClosedInterceptor).
"""
from __future__ import annotations

import grpc

from attnserve.v1 import attnserve_pb2 as pb
from service.transport import convert
from service.metrics import Metrics
from service.repository.repository import ModelRepository
from service.transport.servicer import SERVICE_NAME, Served, observe


class AdminServicer:
    def __init__(self, repository: ModelRepository, metrics: Metrics):
        self.repository = repository
        self.metrics = metrics

    async def ReloadModel(self, request: pb.ReloadModelRequest, context: grpc.aio.ServicerContext) -> pb.ModelInfo:
        served = Served()
        return await observe(self.metrics, "ReloadModel", served, context,
                             self._reload(request.model_name, request.model_version, served))

    async def _reload(self, name: str, version: str, served: Served) -> pb.ModelInfo:
        manager = self.repository.manager(name)
        served.model = manager.name
        bundle = await self.repository.reload_model(manager.name, version)  # in every worker process
        return convert.to_model_info(bundle.manifest)


def admin_handler(servicer: AdminServicer) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {
        "ReloadModel": grpc.unary_unary_rpc_method_handler(
            servicer.ReloadModel, request_deserializer=pb.ReloadModelRequest.FromString,
            response_serializer=pb.ModelInfo.SerializeToString),
    })
