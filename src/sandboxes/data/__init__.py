"""Data generators, one module per sandbox; none of them knows a model."""
