"""What every server shares (REST, MCP, and the commands that start them): the API key and web
sessions (auth), the request shapes REST and MCP both validate (payloads), and the background
work a running server keeps (lifecycle).
"""
