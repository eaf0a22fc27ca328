"""The bench's one table: figures per event loop, the aim, the Go node's anchor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (the smallest value with at least `share` of
    the values at or below it); NaN when there is nothing to rank, so an
    empty measurement never reads as zero."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(round(share * len(ordered), 9)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    fmt: str
    aim: str = ""
    go: str = ""


ROWS: list[Row] = [
    Row("raw_tls_mbps", "raw TLS stream, MB/s", "{:.1f}"),
    Row("bulk1_mbps", "bulk 1 hop (/send+/recv), MB/s", "{:.1f}"),
    Row("bulk1_ratio_tls", "  ratio to raw TLS", "{:.3f}", ">= 0.4", "0.06-0.08"),
    Row("bulk3_mbps", "bulk over 3 relays, MB/s", "{:.1f}"),
    Row("bulk3_ratio_1hop", "  ratio to 1 hop", "{:.3f}", ">= 0.8"),
    Row("bulk3_ratio_tls", "  ratio to raw TLS", "{:.3f}", "", "0.05"),
    Row("noop_req_per_s", "no-op aiohttp handler, req/s", "{:.0f}"),
    Row("small_msgs_per_s", "1 KiB messages, 8 senders, msg/s", "{:.0f}"),
    Row("small_ratio_noop", "  ratio to no-op rate", "{:.3f}", ">= 0.5", "0.43"),
    Row("small_lost", "  lost (acknowledged, never received)", "{:.0f}", "0", "18-20%"),
    Row("small_failed", "  refused (non-200 /send)", "{:.0f}"),
    Row("latency_p50_ms", "  latency send->recv p50, ms", "{:.2f}", "<= 2", "5.2"),
    Row("latency_p99_ms", "  latency send->recv p99, ms", "{:.2f}", "", "10"),
    Row("ws_msgs_per_s", "1 KiB messages over /ws, one socket, acks/s", "{:.0f}"),
    Row("ws_lost", "  lost (acknowledged, never delivered)", "{:.0f}", "0"),
    Row("idle_rss_mb", "idle node RSS, MB", "{:.1f}", "<= 40", "13"),
    Row("relay_peak_rss_mb", "relay peak RSS during bulk, MB", "{:.1f}"),
    Row("relay_growth_mib", "  growth over idle, MiB", "{:.1f}", "<= 16"),
    Row("start_bridge_s", "start-up: process to bridge, s", "{:.2f}"),
    Row("start_peered_s", "start-up: process to peering up, s", "{:.2f}"),
    Row("unknown_peer_s", "unknown peer id: /send answers, s", "{:.2f}", "<= 10", "127"),
    Row("unknown_peer_status", "  its HTTP status", "{:.0f}", "502"),
]

FIGURE_KEYS = [row.key for row in ROWS]


def _cell(row: Row, figures: dict[str, float]) -> str:
    value = figures.get(row.key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return row.fmt.format(value)


def render(results: dict[str, dict[str, float]], title: str) -> str:
    """A plain-text table, also valid Markdown, one column per loop kind."""
    loops = list(results)
    header = ["figure", *loops, "aim", "Go node"]
    body = [[row.label, *(_cell(row, results[loop]) for loop in loops), row.aim, row.go]
            for row in ROWS]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([title, "", line(header), rule, *(line(cells) for cells in body)])
