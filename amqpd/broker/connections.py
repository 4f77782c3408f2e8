"""The open connections, also kept by user and by vhost.

Every connection.open checks the vhost's and the user's connection limits, and every channel.open the user's
channel limit: with the connections kept per user and per vhost each check looks at that user's or vhost's
connections only, not at all of them (with 10,000 connections, counting them all on each open made opening
them quadratic), and the channels open per user are a kept count, not a sum over the user's connections. A
connection is filed under the user and vhost it had when added; neither changes after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Connections:
    def __init__(self) -> None:
        self._all: dict[Any, tuple[str, str]] = {}  # session -> (user, vhost name), in order of opening
        self._by_user: dict[str, dict[Any, None]] = {}
        self._by_vhost: dict[str, dict[Any, None]] = {}
        self._channels: dict[Any, int] = {}  # session -> its open channels, as told (channel_opened/closed)
        self._user_channels: dict[str, int] = {}  # user -> the sum of its sessions' open channels
        # Channels that have held an unacked delivery since the last ack-timeout check: that check visits
        # these, not every channel (a channel drops out once it holds none or has closed).
        self.unacked_channels: dict[Any, None] = {}

    def add(self, session: Any) -> None:
        """An opened session: its `user` and `vhost` (a VirtualHost) are set."""
        if session in self._all:
            return
        user, vhost = session.user, session.vhost.name
        self._all[session] = (user, vhost)
        self._by_user.setdefault(user, {})[session] = None
        self._by_vhost.setdefault(vhost, {})[session] = None

    def discard(self, session: Any) -> None:
        filed = self._all.pop(session, None)
        if filed is None:
            return
        user, vhost = filed
        _drop(self._by_user, user, session)
        _drop(self._by_vhost, vhost, session)
        self._count_channels(user, -self._channels.pop(session, 0))

    def channel_opened(self, session: Any) -> None:
        """One more channel open on an added session (a session not added counts none)."""
        filed = self._all.get(session)
        if filed is not None:
            self._channels[session] = self._channels.get(session, 0) + 1
            self._count_channels(filed[0], 1)

    def channel_closed(self, session: Any) -> None:
        """One of its channels closed; those a session still has when discarded go with it."""
        filed = self._all.get(session)
        if filed is not None and self._channels.get(session, 0) > 0:
            self._channels[session] -= 1
            self._count_channels(filed[0], -1)

    def watch_unacked(self, channel: Any) -> None:
        """The channel's first unacked delivery since it held none (Outstanding.on_first)."""
        self.unacked_channels[channel] = None

    def _count_channels(self, user: str, change: int) -> None:
        total = self._user_channels.get(user, 0) + change
        if total > 0:
            self._user_channels[user] = total
        else:
            self._user_channels.pop(user, None)

    def channel_count_of_user(self, user: str) -> int:
        """The channels open on all the user's connections."""
        return self._user_channels.get(user, 0)

    def of_user(self, user: str) -> list[Any]:
        return list(self._by_user.get(user, ()))

    def in_vhost(self, vhost: str) -> list[Any]:
        return list(self._by_vhost.get(vhost, ()))

    def count_of_user(self, user: str) -> int:
        return len(self._by_user.get(user, ()))

    def count_in_vhost(self, vhost: str) -> int:
        return len(self._by_vhost.get(vhost, ()))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, session: object) -> bool:
        return session in self._all


def _drop(index: dict[str, dict[Any, None]], key: str, session: Any) -> None:
    members = index[key]
    del members[session]
    if not members:
        del index[key]
