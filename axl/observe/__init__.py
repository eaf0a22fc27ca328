"""Observability: Prometheus metrics, the dashboard page and its JSON and event stream.

The Observatory (axl.observe.observatory) runs with every node; the HTTP
handlers (axl.observe.web) load with the bridge's full application.
"""

from axl.observe.observatory import Observatory

__all__ = ["Observatory"]
