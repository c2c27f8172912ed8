"""The ``aptix_pipeline.steps`` subpackage: one module per AGN-036 §4 step (next issue)."""

__all__: list[str] = []
