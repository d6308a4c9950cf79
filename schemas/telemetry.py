"""Names of the OpenTelemetry semantic conventions Moat's spans speak (GenAI tool
execution, MCP), defined once for the adapter's span and the MCP server's."""

from __future__ import annotations

# GenAI conventions: the operation of a tool call, and the kind of tool Moat's are. An
# ``extension`` is a tool the agent's side runs to call an external API itself, as Moat
# does; a ``function`` is one the model only names and the client application runs; a
# ``datastore`` one that retrieves grounding data.
OPERATION_NAME = "gen_ai.operation.name"
EXECUTE_TOOL = "execute_tool"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_TYPE_EXTENSION = "extension"
ERROR_TYPE = "error.type"
# The conventions' value of ``error.type`` when nothing names the failure better.
OTHER_ERROR = "_OTHER"

# MCP conventions: what the server adds to the SDK's span of each message.
MCP_METHOD_NAME = "mcp.method.name"
MCP_SESSION_ID = "mcp.session.id"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"

# Moat's own attributes, beside the conventions'.
MOAT_RECEIPT_ID = "moat.receipt_id"
MOAT_CAPABILITY_ID = "moat.capability.id"
