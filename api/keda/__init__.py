"""KEDA external scaler (gRPC): KEDA's own externalscaler.proto and its generated modules in vendor/."""
