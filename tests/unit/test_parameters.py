"""The runtime parameters model (amqpd/broker/parameters.py): components own their parameters, see every
change, and are handed the recovered ones when they register; every change is written through to the store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amqpd.broker.parameters import ParameterError, Parameters


class Recorder:
    """A component that refuses values with "bad" in them and records what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def validate(self, vhost: str, name: str, value: Any) -> None:
        if "bad" in value:
            raise ParameterError(f"{name} is bad")

    def changed(self, vhost: str, name: str, value: Any | None) -> None:
        self.calls.append((vhost, name, value))


class Store:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], str] = {}

    def put_parameter(self, component: str, vhost: str, name: str, document: str) -> None:
        self.rows[(component, vhost, name)] = document

    def delete_parameter(self, component: str, vhost: str, name: str) -> None:
        del self.rows[(component, vhost, name)]


def test_a_component_nobody_registered_is_refused_by_name() -> None:
    with pytest.raises(ParameterError, match="component shovel not found"):
        Parameters().put("shovel", "/", "s", {})


def test_the_component_validates_and_hears_each_change() -> None:
    params, comp = Parameters(), Recorder()
    params.register("c", comp)
    with pytest.raises(ParameterError, match="x is bad"):
        params.put("c", "/", "x", {"bad": 1})
    assert params.put("c", "/", "x", {"ok": 1}) is False
    assert params.put("c", "/", "x", {"ok": 2}) is True
    assert params.delete("c", "/", "x") is True
    assert params.delete("c", "/", "x") is False
    assert comp.calls == [("/", "x", {"ok": 1}), ("/", "x", {"ok": 2}), ("/", "x", None)]


def test_recovered_parameters_go_to_their_component_when_it_registers() -> None:
    store = Store()
    first = Parameters(store)
    first.register("c", Recorder())
    first.put("c", "v", "a", {"n": 1})
    first.put_global("cluster_name", "edge")
    again = Parameters()
    again.load(store.rows.values())
    comp = Recorder()
    again.register("c", comp)
    assert comp.calls == [("v", "a", {"n": 1})]
    assert again.global_entries() == [{"name": "cluster_name", "value": "edge"}]
    assert again.entries() == [{"value": {"n": 1}, "vhost": "v", "component": "c", "name": "a"}]


def test_deleting_a_vhost_clears_its_parameters_everywhere() -> None:
    store, comp = Store(), Recorder()
    params = Parameters(store)
    params.register("c", comp)
    params.put("c", "gone", "a", {})
    params.put("c", "kept", "b", {})
    params.drop_vhost("gone")
    assert [e["vhost"] for e in params.entries()] == ["kept"]
    assert list(store.rows) == [("c", "kept", "b")]
    assert comp.calls[-1] == ("gone", "a", None)
    assert json.loads(store.rows[("c", "kept", "b")])["name"] == "b"
