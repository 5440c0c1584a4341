"""KEDA external scaler (gRPC): the interface in externalscaler.proto, generated modules beside it."""
