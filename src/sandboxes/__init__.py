"""sandboxes: the package behind the executable book of transformer theory."""

__version__ = "0.1.0"
