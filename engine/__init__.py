"""The ``aptix_pipeline.engine`` subpackage: the state machine and ``Pipeline`` (next issue)."""

__all__: list[str] = []
