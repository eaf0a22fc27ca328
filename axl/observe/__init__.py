"""Observability: Prometheus metrics, the dashboard page and its JSON and event stream."""

from axl.observe.web import add_observability

__all__ = ["add_observability"]
