"""When a client has a `/recv` message: the one rule both HTTP servers keep.

Writing an answer proves nothing: the bytes sit in the node's buffers, then
in the kernel's, then in the client host's, and a client that closes
without reading them loses them. So a message written on a connection stays
in the inbox, held for that connection, until the client shows it has it:

- it sends more on the connection after the answer was written: an HTTP/1.1
  client sends its next request once it has read the whole answer before it
  (a client that pipelines requests vouches for answers it has not read);
- it ends the connection with a FIN while every byte written to it is
  acknowledged by its host: a socket closed with unread bytes in it sends a
  reset instead (RFC 1122 4.2.2.13), and a socket closed before the bytes
  came answers them with a reset (RFC 9293), so a FIN with nothing
  unacknowledged means the client read everything; after a FIN that came
  first, the bytes acknowledged later went to a socket still open for
  reading (a client that only shut down its sending side).

A reset, or an end of the connection before either of those (a timeout, the
node stopping), gives the message back to the front of the queue: it is
delivered again, with the same `X-Message-Id`, never lost.

This module holds the rule and nothing else; the front door
(axl.bridge.front) feeds it what its connections see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from axl.bridge.api import QueuedMessage


class Handoff:
    """The `/recv` messages written on one connection whose client is not yet known to have them."""

    def __init__(self) -> None:
        self._unproven: list[QueuedMessage] = []
        self.client_finished = False

    @property
    def pending(self) -> bool:
        return bool(self._unproven)

    def written(self, message: QueuedMessage) -> None:
        """`message`'s answer is written to the connection, all of it."""
        self._unproven.append(message)

    def withdraw(self, message: QueuedMessage) -> bool:
        """Writing `message`'s answer failed: forget it. False when the
        connection's end already gave it back."""
        if message not in self._unproven:
            return False
        self._unproven.remove(message)
        return True

    def client_sent(self) -> list[QueuedMessage]:
        """The client sent bytes after the answers written so far: it has them all."""
        return self._take()

    def finished(self) -> None:
        """The client's FIN arrived: it sends nothing more."""
        self.client_finished = True

    def unacknowledged(self, count: int) -> list[QueuedMessage]:
        """After the client's FIN, `count` bytes written to it are not yet
        acknowledged by its host: at 0 it has every answer, else none yet."""
        assert self.client_finished
        return self._take() if count == 0 else []

    def broken(self) -> list[QueuedMessage]:
        """The connection was reset or ended otherwise: its client has none of
        the messages not yet proven; they go back."""
        return self._take()

    def _take(self) -> list[QueuedMessage]:
        taken, self._unproven = self._unproven, []
        return taken
