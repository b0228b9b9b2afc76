"""The web interface served by ``kiwifs serve`` at ``/`` (see docs/web.md)."""

from kiwifs.rest.web.routes import install

__all__ = ["install"]
