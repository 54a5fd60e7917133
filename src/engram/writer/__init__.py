"""The background memory writer (DESIGN.md §8): conversations in, reviewed memories out.

Every ``interval`` completed assistant turns, an extractor turns the turns not yet processed into memory
actions, committed as one commit on ``writer/<target>/<run id>`` and merged by policy. State, watermark and
a cross-process lease live in the store (see :mod:`engram.writer.state`); failed runs leave redacted traces.
"""

from engram.writer.conversations import Conversation, ConversationLog, Turn
from engram.writer.extract import Action, Extractor, ExtractRequest, MemoryNote, Workspace
from engram.writer.metrics import WriterMetrics
from engram.writer.offline import OfflineExtractor
from engram.writer.openai import OpenAIExtractor
from engram.writer.redact import redact
from engram.writer.run import OUTCOMES
from engram.writer.settings import WriterSettings
from engram.writer.spec import WriterConfig, extractor_from_spec
from engram.writer.traces import TraceSettings, read_trace
from engram.writer.writer import Appended, AsyncMemoryWriter, Decision, MemoryWriter

__all__ = [
    "OUTCOMES",
    "Action",
    "Appended",
    "AsyncMemoryWriter",
    "Conversation",
    "ConversationLog",
    "Decision",
    "ExtractRequest",
    "Extractor",
    "MemoryNote",
    "MemoryWriter",
    "OfflineExtractor",
    "OpenAIExtractor",
    "TraceSettings",
    "Turn",
    "Workspace",
    "WriterConfig",
    "WriterMetrics",
    "WriterSettings",
    "extractor_from_spec",
    "read_trace",
    "redact",
]
