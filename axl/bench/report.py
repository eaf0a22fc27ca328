"""The bench's one table: figures per event loop, an earlier run's figures, the target."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BEFORE_FILE = Path(__file__).with_name("before.json")
"""The figures issue-by-issue work is measured against, shipped so that every
`make bench` shows them: written by `python -m axl.bench --json` (see its
`source` field for the commit, machine and command)."""


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
    target: str = ""


# The receiver's inbox in the bench's second round of 1 KiB phases (the
# first runs the default: a durable inbox with inbox_sync "normal").
INBOX_MODE_LABELS = {"off": 'inbox in memory (inbox_path "")', "full": 'inbox_sync "full"'}


def _inbox_mode_rows(mode: str, how: str) -> list[Row]:
    rows = [
        Row(f"bulk1_mbps_inbox_{mode}", f"bulk 1 hop, {how}, MB/s", "{:.1f}"),
        Row(f"bulk1_probe_p99_ms_inbox_{mode}", "  meanwhile another client's GET to the receiver, p99 ms",
            "{:.1f}", "<= 15"),
        Row(f"bulk1_probe_max_ms_inbox_{mode}", "    the longest, ms", "{:.1f}"),
        Row(f"small_msgs_per_s_inbox_{mode}", f"1 KiB /send x 8 senders, {how}, acknowledged/s", "{:.0f}"),
        Row(f"small_ratio_noop_inbox_{mode}", "  ratio to no-op rate", "{:.3f}"),
        Row(f"small_lost_inbox_{mode}", "  lost (acknowledged, never received)", "{:.0f}", "0"),
        Row(f"small_cpu_receiver_ms_inbox_{mode}", "  CPU per message: receiving node, ms", "{:.3f}"),
        Row(f"ws_msgs_per_s_inbox_{mode}", f"1 KiB over one /ws socket, {how}, acknowledged/s", "{:.0f}"),
        Row(f"ws_lost_inbox_{mode}", "  lost (acknowledged, never received)", "{:.0f}", "0"),
        Row(f"ws_refused_share_inbox_{mode}", "  share refused (503: the receiver's queue was full)", "{:.2f}"),
        Row(f"ws_cpu_receiver_ms_inbox_{mode}", "  CPU per message: receiving node, ms", "{:.3f}"),
    ]
    if mode != "off":  # an inbox in memory makes no commits
        rows += [Row(f"ws_commit_ms_inbox_{mode}", "  receiver's inbox commit, mean ms", "{:.2f}"),
                 Row(f"ws_per_commit_inbox_{mode}", "  messages per inbox commit", "{:.1f}")]
    return rows


ROWS: list[Row] = [
    Row("raw_tls_mbps", "raw TLS stream, MB/s", "{:.1f}"),
    Row("bulk1_mbps", "bulk 1 hop (/send+/recv), MB/s", "{:.1f}"),
    Row("bulk1_ratio_tls", "  ratio to raw TLS", "{:.3f}", ">= 0.3"),
    Row("bulk1_probe_p99_ms", "  as it lands, another client's GET to the receiver, p99 ms", "{:.1f}", "<= 15"),
    Row("bulk1_probe_max_ms", "    the longest, ms", "{:.1f}"),
    Row("bulk1_mbps_in_turn_durable", "  in turn with a receiver keeping its inbox in memory: durable, MB/s",
        "{:.1f}"),
    Row("bulk1_mbps_in_turn_memory", "    in memory, MB/s", "{:.1f}"),
    Row("bulk1_ratio_inbox_off", "    ratio, durable to in memory", "{:.3f}", ">= 0.9"),
    Row("bulk3_mbps", "bulk over 3 relays, MB/s", "{:.1f}"),
    Row("bulk3_ratio_1hop", "  ratio to 1 hop", "{:.3f}", ">= 0.8"),
    Row("bulk3_ratio_tls", "  ratio to raw TLS", "{:.3f}"),
    Row("noop_req_per_s", "no-op aiohttp handler, req/s", "{:.0f}"),
    Row("noop_cpu_server_ms", "  CPU per request: the no-op server, ms", "{:.3f}"),
    Row("noop_cpu_client_ms", "  CPU per request: the bench's client, ms", "{:.3f}"),
    Row("idle_latency_p50_ms", "one message at a time, send->receipt p50, ms", "{:.2f}", "<= 2"),
    Row("idle_latency_p99_ms", "  p99, ms", "{:.2f}", "<= 5"),
    Row("small_msgs_per_s", "1 KiB /send x 8 senders (durable inbox), acknowledged (200)/s", "{:.0f}"),
    Row("small_ratio_noop", "  ratio to no-op rate", "{:.3f}", ">= 0.4"),
    Row("noop_pairs_per_s", "  the same /send+/recv pairs to a no-op server, /s", "{:.0f}"),
    Row("noop_pairs_ratio_noop", "    their ratio to no-op rate (the probe's ceiling)", "{:.3f}"),
    Row("small_lost", "  lost (acknowledged, never received)", "{:.0f}", "0"),
    Row("small_failed", "  refused (non-200 /send)", "{:.0f}"),
    Row("latency_p50_ms", "  under that load, send->receipt p50, ms", "{:.2f}"),
    Row("latency_p99_ms", "  under that load, send->receipt p99, ms", "{:.2f}"),
    Row("small_cpu_sender_ms", "  CPU per message: sending node, ms", "{:.3f}"),
    Row("small_cpu_receiver_ms", "  CPU per message: receiving node, ms", "{:.3f}"),
    Row("small_cpu_client_ms", "  CPU per message: the bench's client, ms", "{:.3f}"),
    Row("ws_msgs_per_s", "1 KiB over one /ws socket (durable inbox), acknowledged (200)/s", "{:.0f}", ">= 10000"),
    Row("ws_noop_req_per_s", "  no-op aiohttp handler between its rounds (median), req/s", "{:.0f}"),
    Row("ws_ratio_noop", "  ratio to that no-op rate", "{:.3f}", ">= 5"),
    Row("ws_ratio_noop_end", "  ratio to the no-op rate above (best of 3, after every phase)", "{:.3f}"),
    Row("ws_lost", "  lost (acknowledged, never received)", "{:.0f}", "0"),
    Row("ws_refused_share", "  share refused (503: the receiver's queue was full)", "{:.2f}"),
    Row("ws_cpu_sender_ms", "  CPU per message: sending node, ms", "{:.3f}"),
    Row("ws_cpu_receiver_ms", "  CPU per message: receiving node, ms", "{:.3f}"),
    Row("ws_cpu_client_ms", "  CPU per message: the bench's clients (sending and receiving), ms", "{:.3f}"),
    Row("ws_commit_ms", "  receiver's inbox commit, mean ms", "{:.2f}"),
    Row("ws_per_commit", "  messages per inbox commit", "{:.1f}"),
    Row("ws_msgs_per_s_in_turn_durable", "  in turn with a receiver keeping its inbox in memory: durable, /s",
        "{:.0f}"),
    Row("ws_msgs_per_s_in_turn_memory", "    in memory, /s", "{:.0f}"),
    Row("ws_ratio_inbox_off", "    ratio, durable to in memory", "{:.3f}", ">= 0.9"),
    *(row for mode, how in INBOX_MODE_LABELS.items() for row in _inbox_mode_rows(mode, how)),
    Row("idle_rss_mb", "idle node RSS, MB", "{:.1f}", "<= 40"),
    Row("relay_peak_rss_mb", "relay peak RSS during bulk, MB", "{:.1f}"),
    Row("relay_growth_mib", "  growth over idle, MiB", "{:.1f}", "<= 16"),
    Row("start_bridge_s", "start-up: process to bridge, s", "{:.2f}"),
    Row("start_peered_s", "start-up: process to peering up, s", "{:.2f}"),
    Row("unknown_peer_s", "unknown peer id: /send answers, s", "{:.2f}", "<= 10"),
    Row("unknown_peer_status", "  its HTTP status", "{:.0f}", "502"),
]

FIGURE_KEYS = [row.key for row in ROWS]


@dataclass(frozen=True)
class EarlierRun:
    """Figures of an earlier `--json` run, shown beside this run's."""

    heading: str
    figures: dict[str, float]
    source: str

    @classmethod
    def load(cls, path: Path, loop: str) -> "EarlierRun":
        """ValueError with a one-line reason when the file is not such a run."""
        try:
            data = json.loads(path.read_text())
            figures = data["loops"][loop]
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path} is not a `python -m axl.bench --json` file "
                             f"with {loop} figures") from None
        commit = str(data.get("commit") or "earlier")[:7]
        return cls(f"{commit} {loop}", figures, str(data.get("source", "")))


def _cell(row: Row, figures: dict[str, float]) -> str:
    value = figures.get(row.key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return row.fmt.format(value)


def render(results: dict[str, dict[str, float]], title: str,
           earlier: EarlierRun | None = None) -> str:
    """A plain-text table, also valid Markdown: one column per loop kind, then
    the earlier run's column when given, then the target."""
    columns = dict(results)
    if earlier is not None:
        columns[earlier.heading] = earlier.figures
    header = ["figure", *columns, "target"]
    body = [[row.label, *(_cell(row, figures) for figures in columns.values()), row.target]
            for row in ROWS]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    lines = [title, "", line(header), rule, *(line(cells) for cells in body)]
    if earlier is not None and earlier.source:
        lines += ["", f"{earlier.heading}: {earlier.source}"]
    return "\n".join(lines)
