"""The link layer: peer URIs, the meta handshake, ironwood framing,
liveness, the per-link traffic queue, TLS and the asyncio link manager."""
