"""Switch in one line: the APIs of other memory systems over engram's public library, and importers of their data.

Import the module of the system your code was written for; nothing is registered by importing this package:

- :mod:`engram.compat.memoir`: memoir's ``ProllyTreeStore`` (snapshots, checkout, branches, merge).
- :mod:`engram.compat.claude_slack`: claude-slack's async ``ClaudeSlackAPI`` (channels, messages, notes).
- :mod:`engram.compat.mem0`: mem0's ``Memory`` and ``AsyncMemory``.
- :mod:`engram.compat.importers`: ``engram import --from mem0|langgraph-sqlite|langgraph-postgres|claude-slack``.

LangGraph's store is :class:`engram.integrations.langgraph.EngramStore`.
"""
