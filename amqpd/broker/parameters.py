"""Runtime parameters (RabbitMQ's rabbit_runtime_parameters): per-vhost values owned by a component (e.g.
`shovel`), and global values. A component is whoever registered under its name: it checks a value before it
is kept and hears of every change, so what it runs follows the catalogue. A component nobody registered is
refused, as RabbitMQ refuses one whose plugin is not enabled.

Each change is written through to the store (none: in memory only); a global parameter is kept with
component and vhost "".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol


class ParameterError(ValueError):
    """A value RabbitMQ would refuse; the text is its reason after "Validation failed"."""


class Component(Protocol):
    def validate(self, vhost: str, name: str, value: Any) -> None:
        """Raise ParameterError when `value` cannot be used."""

    def changed(self, vhost: str, name: str, value: Any | None) -> None:
        """Set (value) or cleared (None); also called for each parameter loaded at recovery."""


class ParameterStore(Protocol):
    def put_parameter(self, component: str, vhost: str, name: str, document: str) -> None: ...
    def delete_parameter(self, component: str, vhost: str, name: str) -> None: ...


Key = tuple[str, str, str]  # component, vhost, name


class Parameters:
    def __init__(self, store: ParameterStore | None = None) -> None:
        self.values: dict[Key, Any] = {}
        self.globals: dict[str, Any] = {}
        self.components: dict[str, Component] = {}
        self.store = store

    def register(self, name: str, component: Component) -> None:
        """From here on `component` owns its parameters; those already kept (recovered) are handed to it."""
        self.components[name] = component
        for (owner, vhost, pname), value in sorted(self.values.items()):
            if owner == name:
                component.changed(vhost, pname, value)

    # -- per-vhost ---------------------------------------------------------------------------------------------

    def put(self, component: str, vhost: str, name: str, value: Any) -> bool:
        """Create or replace; True when it existed."""
        owner = self.components.get(component)
        if owner is None:
            raise ParameterError(f"component {component} not found")
        owner.validate(vhost, name, value)
        key = (component, vhost, name)
        existed = key in self.values
        self.values[key] = value
        if self.store is not None:
            self.store.put_parameter(component, vhost, name, json.dumps(as_json(key, value)))
        owner.changed(vhost, name, value)
        return existed

    def delete(self, component: str, vhost: str, name: str) -> bool:
        if self.values.pop((component, vhost, name), _MISSING) is _MISSING:
            return False
        if self.store is not None:
            self.store.delete_parameter(component, vhost, name)
        owner = self.components.get(component)
        if owner is not None:
            owner.changed(vhost, name, None)
        return True

    def get(self, component: str, vhost: str, name: str) -> Any | None:
        return self.values.get((component, vhost, name))

    def entries(self, component: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
        return [
            as_json(key, value)
            for key, value in sorted(self.values.items())
            if component in (None, key[0]) and vhost in (None, key[1])
        ]

    def drop_vhost(self, vhost: str) -> None:
        for component, v, name in [k for k in self.values if k[1] == vhost]:
            self.delete(component, v, name)

    # -- global ------------------------------------------------------------------------------------------------

    def put_global(self, name: str, value: Any) -> bool:
        existed = name in self.globals
        self.globals[name] = value
        if self.store is not None:
            self.store.put_parameter("", "", name, json.dumps({"name": name, "value": value}))
        return existed

    def delete_global(self, name: str) -> bool:
        if self.globals.pop(name, _MISSING) is _MISSING:
            return False
        if self.store is not None:
            self.store.delete_parameter("", "", name)
        return True

    def global_entries(self) -> list[dict[str, Any]]:
        return [{"name": name, "value": value} for name, value in sorted(self.globals.items())]

    def load(self, documents: Iterable[str]) -> None:
        """Recovery: the documents the store was given (components register later and are handed theirs)."""
        for document in documents:
            row = json.loads(document)
            if "component" in row:
                self.values[(row["component"], row["vhost"], row["name"])] = row["value"]
            else:
                self.globals[row["name"]] = row["value"]


_MISSING = object()


def as_json(key: Key, value: Any) -> dict[str, Any]:
    component, vhost, name = key
    return {"value": value, "vhost": vhost, "component": component, "name": name}
