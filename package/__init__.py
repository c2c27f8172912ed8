"""aptix-pipeline: one Aptix agent turn as an explicit, formal state machine.

The import namespace is assembled from the repository's top-level folders
(DESIGN.md "Layout and layers"): ``aptix_pipeline.contracts`` (wire models and
ports), ``aptix_pipeline.validators`` (AGN-036/AGN-034/AGN-033 rules),
``aptix_pipeline.steps``, ``aptix_pipeline.engine`` and ``aptix_pipeline.adapters``.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
