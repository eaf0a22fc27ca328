"""Send numpy arrays (and torch tensors, when torch is installed) between nodes.

A tensor travels as one msgpack map: {"tensor": {"dtype", "shape", "data",
"framework"}, "name", "seq"}. The receiver answers every tensor with an ack
carrying the SHA-256 of the bytes it got, so the sender knows the copy is
bit-identical.

    python examples/tensors.py recv --node 1                       # receiver
    python examples/tensors.py send --node 0 --to-node 1 --shape 64,64
    python examples/tensors.py bandwidth --node 0 --to-node 1      # table of MB/s
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from common import add_bridge_arguments, chosen_bridge, run_main, testnet_node  # first: see common.py

import msgpack
import numpy as np

from axl.client import AsyncClient

try:
    import torch
except ImportError:
    torch = None

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
ENVELOPE_ALLOWANCE = 1024  # msgpack keys, dtype, shape and name around the raw bytes
MAX_RECV_WAIT_SECONDS = 5.0
BAR_WIDTH = 30


@dataclass
class TensorMessage:
    name: str
    seq: int
    array: np.ndarray
    framework: str
    torch_dtype: str | None = None

    def as_framework(self) -> Any:
        """The array as the sender had it: a torch tensor when it was one and torch is here."""
        if self.framework != "torch" or torch is None:
            return self.array
        tensor = torch.from_numpy(self.array.copy())
        return tensor.view(torch.bfloat16) if self.torch_dtype == "bfloat16" else tensor


@dataclass
class Ack:
    seq: int
    sha256: str
    size: int


def to_numpy(value: Any) -> tuple[np.ndarray, str, str | None]:
    """A C-contiguous numpy view of ``value``, its framework, and torch's dtype if numpy has none."""
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy(), "torch", "bfloat16"
        return tensor.numpy(), "torch", None
    return np.ascontiguousarray(value), "numpy", None


def pack(value: Any, name: str = "tensor", seq: int = 0) -> bytes:
    array, framework, torch_dtype = to_numpy(value)
    tensor = {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes(), "framework": framework}
    if torch_dtype:
        tensor["torch_dtype"] = torch_dtype
    return msgpack.packb({"tensor": tensor, "name": name, "seq": seq}, use_bin_type=True)


def unpack(body: bytes) -> TensorMessage | None:
    """The tensor in ``body``, or None if ``body`` is not a well-formed tensor message."""
    try:
        document = msgpack.unpackb(body, raw=False)
        tensor = document["tensor"]
        dtype = np.dtype(tensor["dtype"])
        shape = tuple(int(n) for n in tensor["shape"])
        data = tensor["data"]
        if dtype.hasobject or not isinstance(data, bytes) or any(n < 0 for n in shape):
            return None
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != len(data):
            return None
        array = np.frombuffer(data, dtype=dtype).reshape(shape)
        return TensorMessage(str(document["name"]), int(document["seq"]), array,
                             str(tensor.get("framework", "numpy")), tensor.get("torch_dtype"))
    except (ValueError, TypeError, KeyError, msgpack.UnpackException):
        return None


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def pack_ack(message: TensorMessage) -> bytes:
    return msgpack.packb({"ack": message.seq, "sha256": digest(message.array), "size": message.array.nbytes})


def unpack_ack(body: bytes) -> Ack | None:
    try:
        document = msgpack.unpackb(body, raw=False)
        return Ack(int(document["ack"]), str(document["sha256"]), int(document["size"]))
    except (ValueError, TypeError, KeyError, msgpack.UnpackException):
        return None


async def wait_ack(bridge: AsyncClient, peer: str, seq: int, timeout: float) -> Ack:
    """The ack for ``seq`` from ``peer``; other messages found meanwhile are discarded."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        received = await bridge.recv(wait=min(left, MAX_RECV_WAIT_SECONDS))
        if received is None or received.sender != peer:
            continue
        ack = unpack_ack(received.body)
        if ack is not None and ack.seq == seq:
            return ack
    raise TimeoutError(f"no ack for tensor {seq} from {peer[:16]} within {timeout:g}s")


async def send_tensor(bridge: AsyncClient, peer: str, value: Any, name: str = "tensor", seq: int = 0,
                      ack_timeout: float = 60.0) -> Ack:
    """Send one tensor and wait for its ack; raises ValueError if the copy differs."""
    array, _, _ = to_numpy(value)
    await bridge.send(peer, pack(value, name, seq))
    ack = await wait_ack(bridge, peer, seq, ack_timeout)
    if ack.sha256 != digest(array):
        raise ValueError(f"tensor {seq} arrived altered: sha256 {ack.sha256} != {digest(array)}")
    return ack


async def receive_tensors(bridge: AsyncClient, count: int | None = None, timeout: float = 60.0,
                          out: TextIO | None = None) -> list[TensorMessage]:
    """Receive and ack tensors until ``count`` arrived or ``timeout`` seconds pass without one."""
    received_tensors: list[TensorMessage] = []
    deadline = time.monotonic() + timeout
    while (count is None or len(received_tensors) < count) and (left := deadline - time.monotonic()) > 0:
        received = await bridge.recv(wait=min(left, MAX_RECV_WAIT_SECONDS))
        if received is None:
            continue
        message = unpack(received.body)
        if message is None:
            continue
        await bridge.send(received.sender, pack_ack(message))
        received_tensors.append(message)
        deadline = time.monotonic() + timeout
        if out is not None:
            print(f"{message.name} #{message.seq} from {received.sender[:16]}: {message.framework} "
                  f"{message.array.dtype} {message.array.shape} sha256 {digest(message.array)[:16]}", file=out)
    return received_tensors


def bandwidth_sizes(max_message_size: int, factor: int = 4, smallest: int = 1024) -> list[int]:
    """Array sizes in bytes from ``smallest`` up by ``factor``, ending at the largest that fits."""
    largest = max_message_size - ENVELOPE_ALLOWANCE
    sizes = []
    size = smallest
    while size < largest:
        sizes.append(size)
        size *= factor
    sizes.append(largest)
    return sizes


@dataclass
class BandwidthRow:
    size: int
    seconds: float

    @property
    def mb_per_second(self) -> float:
        return self.size / self.seconds / 1e6 if self.seconds > 0 else float("inf")


def progress_bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else BAR_WIDTH
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * done // max(total, 1):3d}%"


async def bandwidth(bridge: AsyncClient, peer: str, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                    factor: int = 4, out: TextIO | None = None, progress: TextIO | None = None) -> list[BandwidthRow]:
    """Send growing uint8 arrays, each timed from /send until its verified ack."""
    sizes = bandwidth_sizes(max_message_size, factor)
    rng = np.random.default_rng(0)
    rows, done, total = [], 0, sum(sizes)
    if out is not None:
        print(f"{'size':>12} {'time ms':>10} {'MB/s':>10}", file=out)
    for seq, size in enumerate(sizes):
        array = rng.integers(0, 256, size=size, dtype=np.uint8)
        started = time.perf_counter()
        await send_tensor(bridge, peer, array, "bandwidth", seq)
        rows.append(BandwidthRow(size, time.perf_counter() - started))
        done += size
        if progress is not None:
            print(f"\r{progress_bar(done, total)}", end="", file=progress, flush=True)
        if out is not None:
            row = rows[-1]
            line = f"{row.size:>12} {row.seconds * 1000:>10.1f} {row.mb_per_second:>10.2f}"
            print(f"\r{line:<{BAR_WIDTH + 8}}", file=out, flush=True)
    return rows


def random_array(shape: list[int], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iub":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


async def main_async(args: argparse.Namespace) -> None:
    async with AsyncClient(chosen_bridge(args)) as bridge:
        if args.mode == "recv":
            print(f"receiving on {bridge.url} as {await bridge.peer_id()}; waiting up to {args.timeout:g} s "
                  f"for a tensor (send one with: python examples/tensors.py send --to {await bridge.peer_id()})",
                  flush=True)
            await receive_tensors(bridge, args.count, args.timeout, out=sys.stdout)
            return
        if args.mode == "send":
            array = random_array(args.shape, args.dtype, args.seed)
            value = torch.from_numpy(array) if args.torch else array
            ack = await send_tensor(bridge, args.to, value, args.name, 0, args.timeout)
            print(f"sent {args.name} {array.dtype} {array.shape}: {ack.size} bytes, sha256 {ack.sha256[:16]} confirmed")
            return
        await bandwidth(bridge, args.to, args.max_size, args.factor, out=sys.stdout, progress=sys.stderr)


def array_shape(text: str) -> list[int]:
    """`--shape`: positive sizes separated by commas, e.g. 64,64."""
    try:
        shape = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not sizes separated by commas, e.g. 64,64") from None
    if any(n <= 0 for n in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be positive")
    return shape


def numpy_dtype(text: str) -> str:
    """`--dtype`: a numeric numpy dtype name, e.g. float32 or int8."""
    try:
        kind = np.dtype(text).kind
    except TypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a numpy dtype (e.g. float32, int8)") from None
    if kind not in "iubfc":
        raise argparse.ArgumentTypeError(f"{text!r} is not a numeric dtype")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description="Tensors over AXL.")
    parser.add_argument("mode", choices=["recv", "send", "bandwidth"])
    add_bridge_arguments(parser)
    parser.add_argument("--to", help="destination peer id (send, bandwidth)")
    parser.add_argument("--to-node", type=int, help="destination: this node of the --testnet file")
    parser.add_argument("--shape", type=array_shape, default="4,4", help="array shape for send [4,4]")
    parser.add_argument("--dtype", type=numpy_dtype, default="float32", help="numpy dtype for send [float32]")
    parser.add_argument("--name", default="tensor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch", action="store_true", help="send a torch tensor (needs torch)")
    parser.add_argument("--count", type=int, default=None, help="recv: stop after this many tensors")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a tensor or an ack [60]")
    parser.add_argument("--max-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE,
                        help="the nodes' max_message_size in bytes [16777216]")
    parser.add_argument("--factor", type=int, default=4, help="bandwidth: size growth per step [4]")
    args = parser.parse_args()
    if args.to_node is not None:
        args.to = testnet_node(args.testnet, args.to_node)["peer_id"]
    if args.mode != "recv" and not args.to:
        parser.error(f"{args.mode} needs --to PEER_ID or --to-node I")
    if args.torch and torch is None:
        parser.error("--torch needs torch installed (pip install torch)")
    run_main(main_async(args))


if __name__ == "__main__":
    main()
