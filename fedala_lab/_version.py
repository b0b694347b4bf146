"""The package version, on the lowest floor so that any layer may record it (docs/design.md#layers)."""

__version__ = "0.1.0"
