"""What the reply reader's tests share: a byte source that cuts a reply anywhere."""

from __future__ import annotations


class Chunks:
    """A byte source for the reader (taskq.broker.resp._Replies): the bytes of some replies,
    handed out ``size`` at a time, so that every reply is cut at every kind of place (inside
    a length, a CRLF, a value)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def recv(self, limit: int) -> bytes:
        piece = self.data[self.at : self.at + min(self.size, limit)]
        self.at += len(piece)
        return piece
