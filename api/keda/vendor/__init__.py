"""Vendored: KEDA's externalscaler.proto and the modules protoc generates from it (see README.md)."""
