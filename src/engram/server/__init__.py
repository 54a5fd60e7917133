"""engram's HTTP API (needs the ``server`` extra): LangGraph's store routes plus versioned ``/v1`` routes.

    from engram.server import ServerConfig, create_app
    app = create_app(ServerConfig(store="./.engram", embedder="hashing"))

Run it with ``engram serve``; see docs/http.md.
"""

from engram.server.app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]
