"""The store contract kit: ``StoreContract``, the cases every ``SessionStore`` passes.

A host that writes its own store (docs/STORES.md "A store of your own")
subclasses ``StoreContract`` in a test module, says how to make its store, and
pytest runs on it the cases the memory, SQLite and PostgreSQL stores pass::

    from aptix_pipeline import StoreContract

    class TestMyStore(StoreContract):
        def make_store(self) -> MyStore:
            return MyStore()

The kit needs pytest, and no asyncio plugin: each case runs its own event loop.
This module only makes pytest rewrite the cases' ``assert`` statements (so a
failing case shows the values it compared, as a host's own test would) before it
loads them from ``store_contract_cases``; ``import aptix_pipeline`` imports
neither, nor pytest.
"""

from __future__ import annotations

try:
    import pytest
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        "aptix_pipeline.StoreContract is a pytest kit: install pytest to use it "
        "(pip install pytest)",
        name=missing.name,
    ) from missing

# Before the cases module is imported: pytest rewrites only modules named to it first.
pytest.register_assert_rewrite("aptix_pipeline.testing.store_contract_cases")

from .store_contract_cases import StoreContract  # noqa: E402

__all__ = ["StoreContract"]
