"""Concrete ports and front doors: stores, LLM clients, catalogs, HTTP app, CLI.

Adapters depend on everything above them; nothing in contracts, validators,
steps or engine imports an adapter (DESIGN.md "Layout and layers").
"""

__all__: list[str] = []
