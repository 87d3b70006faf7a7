"""The registry of link types (``bandwidth.backend`` -> Link class)."""

from dreamddp.registry import Registry

LINKS: Registry = Registry("link", "bandwidth.backend")
