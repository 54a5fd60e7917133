"""Operations (DESIGN.md §8): access policy, tenants, health, and what operators run in production.

Library code every door (HTTP, MCP, CLI) calls; nothing here reads environment variables or files
it was not given.
"""
