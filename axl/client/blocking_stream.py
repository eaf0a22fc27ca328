"""``BlockingMessageStream``: ``MessageStream`` for blocking code
(``Client.stream()``), on an event loop in a thread of its own."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import aiohttp

from axl.client.common import MARGIN_SECONDS, SEND_WINDOW, Bridge, BridgeError, Message, T, payload_bytes
from axl.client.stream import Ack, MessageStream, frame_key, session_for


class BlockingMessageStream:
    """``Client.stream()``: a ``MessageStream`` for blocking code, used as
    ``with node.stream() as ws:``, with the same methods, not awaited.

    The WebSocket needs a reader while the caller does something else (acks
    arrive for sends under way, messages are pushed), so it lives on an event
    loop in a thread of the stream's own; each method hands its work to that
    loop and waits for the result. Ctrl-C while waiting cancels that work.
    """

    def __init__(self, bridge: Bridge, timeout: float, receive: bool, window: int) -> None:
        self.bridge = bridge
        self.url = bridge.url
        self.timeout = timeout
        self.receive = receive
        self.window = window
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stream: MessageStream | None = None
        self._room = threading.BoundedSemaphore(SEND_WINDOW)
        self._lock = threading.Lock()
        self._outgoing: collections.deque[tuple[str, bytes | str, concurrent.futures.Future[Ack]]] = \
            collections.deque()
        self._writing = False
        self._writer: asyncio.Task[None] | None = None
        self._handed_out: int | None = None
        self._handled: list[int] = []

    def __enter__(self) -> "BlockingMessageStream":
        self.open()
        return self

    def __exit__(self, exc_type: type | None, *exc_info: object) -> None:
        self.close(finished=exc_type is None)

    def open(self) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="axl-client-stream", daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            self._call(self._open(), self.timeout)
        except BaseException:
            self._stop_loop()
            raise

    async def _open(self) -> None:
        self._session = session_for(self.bridge)
        self._stream = MessageStream(self._session, self.bridge, self.timeout, self.receive, self.window)
        try:
            await self._stream.open()
        except BaseException:
            await self._session.close()
            raise

    def close(self, finished: bool = True) -> None:
        """As ``MessageStream.close``; then the stream's thread ends."""
        if self._loop is None:
            return
        if finished:
            self._mark_handled()
        handled, self._handled = self._handled, []
        try:
            self._call(self._close(finished, handled))
        finally:
            self._stop_loop()

    async def _close(self, finished: bool, handled: list[int]) -> None:
        assert self._stream is not None and self._session is not None
        try:
            if self._writer is not None:
                await self._writer
            await self._stream.close(finished, handled)
        finally:
            await self._session.close()

    def start_send(self, peer: str, body: bytes | str) -> concurrent.futures.Future[Ack]:
        """Queue one message; the returned future's ``result()`` is its ``Ack``,
        or raises what ``send`` raises. Messages leave in the order queued; with
        SEND_WINDOW of them unacknowledged, this waits (``timeout`` at most)
        for room."""
        self._open_stream()
        frame_key(peer, self.url)
        body = payload_bytes(body)
        if not self._room.acquire(timeout=self.timeout):
            raise BridgeError(None, f"no room to send within {self.timeout:g} s", self.url)
        outcome: concurrent.futures.Future[Ack] = concurrent.futures.Future()
        outcome.set_running_or_notify_cancel()  # settled by the ack alone
        outcome.add_done_callback(lambda _: self._room.release())
        with self._lock:
            self._outgoing.append((peer, body, outcome))
            idle, self._writing = not self._writing, True
        if idle:
            self._running_loop().call_soon_threadsafe(self._start_writer)
        return outcome

    def send(self, peer: str, body: bytes | str) -> Ack:
        """Deliver ``body`` into ``peer``'s receive queue; returns its ack once it is there."""
        outcome = self.start_send(peer, body)
        try:
            return outcome.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise BridgeError(None, f"no ack within {self.timeout:g} s", self.url) from None

    def _start_writer(self) -> None:
        self._writer = self._running_loop().create_task(self._write_queued())

    async def _write_queued(self) -> None:
        """Write what the callers queued, in order, until nothing is left
        (one wake-up of the loop for a burst of sends, not one for each)."""
        stream = self._open_stream()
        while True:
            with self._lock:
                if not self._outgoing:
                    self._writing = False
                    return
                batch = list(self._outgoing)
                self._outgoing.clear()
            for index, (peer, body, outcome) in enumerate(batch):
                try:
                    acked = await stream.start_send(peer, body)
                except asyncio.CancelledError:
                    with self._lock:  # left for _stop_loop to fail
                        self._outgoing.extendleft(reversed(batch[index:]))
                    raise
                except Exception as error:
                    outcome.set_exception(error)
                else:
                    acked.add_done_callback(functools.partial(_copy_outcome, outcome))

    def messages(self) -> Iterator[Message]:
        """This node's incoming messages, as ``MessageStream.messages``: one
        counts as handled once the next one is asked for (or the ``with``
        block ends without an exception). They are fetched a batch at a time
        (all that have arrived), and marked done a batch at a time."""
        stream = self._open_stream()
        if not self.receive:
            raise ValueError("open the stream with receive=True to take messages")
        fetched: collections.deque[Message] = collections.deque()
        while True:
            self._mark_handled()
            if not fetched:
                handled, self._handled = self._handled, []
                try:
                    fetched.extend(self._call(stream.arrivals(handled)))
                except concurrent.futures.CancelledError:
                    return  # closed from another thread
                if not fetched:
                    return
            message = fetched.popleft()
            self._handed_out = message.id
            yield message

    def _mark_handled(self) -> None:
        if self._handed_out is not None:
            self._handled.append(self._handed_out)
            self._handed_out = None

    def _open_stream(self) -> MessageStream:
        if self._stream is None or self._loop is None:
            raise BridgeError(None, "the /ws stream is not open (use with)", self.url)
        return self._stream

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the stream's loop and wait for it (it is cancelled
        if the wait is interrupted or times out)."""
        future = asyncio.run_coroutine_threadsafe(work, self._running_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the work's own
            future.cancel()
            raise BridgeError(None, f"no answer within {timeout:g} s", self.url) from None
        except BaseException:
            future.cancel()
            raise

    def _stop_loop(self) -> None:
        """End the thread, leaving no caller waiting: the loop's work is
        cancelled, and sends never written fail."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), loop).result(MARGIN_SECONDS)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(MARGIN_SECONDS)
            loop.close()
            unsent = BridgeError(None, "the /ws stream closed before the message was written", self.url)
            with self._lock:
                while self._outgoing:
                    self._outgoing.popleft()[2].set_exception(unsent)


async def _cancel_other_tasks() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _copy_outcome(target: concurrent.futures.Future[T], source: asyncio.Future[T]) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


