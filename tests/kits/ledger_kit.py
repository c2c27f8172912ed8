"""The tool ledger's test kit: a catalog with a mail-sending server tool, and tools that count.

``LEDGER_CATALOG`` offers, in mode ``general``, the client tool ``read_file`` and
three server tools: ``send_mail`` (declares nothing), ``send_mail_by_key``
(``idempotent = "by_key"``) and ``lookup`` (``idempotent = "naturally"``).
``CountingTool`` counts its runs and keeps the invocations it got.
"""

from __future__ import annotations

import json
from typing import Any

from aptix_pipeline.contracts import ToolInvocation

__all__ = ["LEDGER_CATALOG", "CountingTool", "ledger_tools"]

LEDGER_CATALOG = """
[[modes]]
name = "general"
display_name = "General"
server_tools = ["send_mail", "send_mail_by_key", "lookup"]

[[server_tools]]
name = "send_mail"
description = "Send one mail"
parameters = { type = "object", properties = { to = { type = "string" } } }

[[server_tools]]
name = "send_mail_by_key"
description = "Send one mail, once per idempotency key"
parameters = { type = "object", properties = { to = { type = "string" } } }
idempotent = "by_key"

[[server_tools]]
name = "lookup"
description = "Read a record"
idempotent = "naturally"

[[agents]]
id = "assistant"
name = "Assistant"
default = true

[[agents.client_tools]]
name = "read_file"
description = "Read a file"
parameters = { type = "object", properties = { path = { type = "string" } } }

[[conversations]]
id = "default"
default = true
"""


class CountingTool:
    """A server tool that counts its runs; ``fail_first`` runs raise after acting."""

    def __init__(self, fail_first: int = 0) -> None:
        self.runs = 0
        self.fail_first = fail_first
        self.invocations: list[ToolInvocation] = []

    async def __call__(self, arguments: dict[str, Any], invocation: ToolInvocation) -> str:
        self.runs += 1
        self.invocations.append(invocation)
        if self.runs <= self.fail_first:
            raise ConnectionResetError("the connection dropped after the mail was handed over")
        return json.dumps({"sent": True, "to": arguments.get("to"), "run": self.runs})


def ledger_tools(name: str, tool: CountingTool) -> dict[str, CountingTool]:
    """An executor for each server tool of ``LEDGER_CATALOG``: ``tool`` under ``name``."""
    tools = {other: CountingTool() for other in ("send_mail", "send_mail_by_key", "lookup")}
    return {**tools, name: tool}
