"""``warmcast api serve``: the HTTP API (and optionally the KEDA external scaler over gRPC)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    api = typer.Typer(no_args_is_help=True, help="Forecast API, dashboard and autoscaler endpoints.")
    app.add_typer(api, name="api")

    @api.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0 for all interfaces)"),
        port: int = typer.Option(8000, min=1, max=65535),
        grpc_port: Optional[int] = typer.Option(None, "--grpc-port", min=0, max=65535,
                                                help="also serve KEDA's external scaler gRPC on this port"),
        workers: int = typer.Option(1, min=1, max=64, help="uvicorn worker processes"),
        config: Optional[Path] = typer.Option(None, "--config", help="settings YAML (else WARMCAST_CONFIG)"),
        shutdown_grace_s: int = typer.Option(3, "--shutdown-grace-s", min=0, max=600,
                                             help="on SIGTERM, seconds open requests may still run before "
                                                  "they are answered 503 (uvicorn's graceful timeout)"),
    ) -> None:
        """Serve the API, the dashboard at / and /metrics; with --grpc-port the KEDA external scaler too."""
        import os

        import uvicorn

        from warmcast.config.settings import load_settings

        settings = load_settings(config)  # fail early, naming a bad setting
        if config:
            os.environ["WARMCAST_CONFIG"] = str(config)  # uvicorn workers build the app from the environment
        scaler = None
        if grpc_port is not None:
            from api.deps import build_context
            from api.keda.scaler import serve as serve_grpc

            scaler = serve_grpc(build_context(settings), f"{host}:{grpc_port}")
            typer.echo(f"KEDA external scaler (gRPC) on {host}:{scaler.port}")
        typer.echo(f"API on http://{host}:{port}  (dashboard /, OpenAPI /docs, metrics /metrics)")
        # On SIGTERM, requests still open after the grace (3 s by default) are cancelled: the process
        # stops promptly (a computation they waited for runs in a daemon thread and ends with it).
        uvicorn.run("api.app:create_app", factory=True, host=host, port=port, workers=workers,
                    log_level=settings.log_level.lower(), timeout_graceful_shutdown=shutdown_grace_s)
        if scaler is not None:
            scaler.stop(grace=1)
