"""Vhosts, exchanges (one module per type), the topic trie, bindings and policies."""
