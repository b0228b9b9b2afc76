"""The MCP interface: server transports, tools, and the texts the tools answer."""
