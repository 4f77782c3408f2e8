"""The broker semantics: exchanges, bindings, queues, consumers — plain objects with no I/O."""
