"""``moat mcp``: the tenant's capabilities as tools of the Model Context Protocol, served
over stdio (desktop agents) or Streamable HTTP, on the agents' client (``moat_client``)."""

from starter.mcp.in_session import InSessionApprovals
from starter.mcp.server import MoatTools, build_server, serve_http, serve_stdio

__all__ = ["InSessionApprovals", "MoatTools", "build_server", "serve_http", "serve_stdio"]
