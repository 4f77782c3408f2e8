"""The one way in: a plan per route and the entries that publish (client, API, delayed release, dead-lettering)."""
