"""The one way in: the Publisher every message goes through (a client, the API, a delayed release,
dead-lettering), delayed delivery and dead-lettering."""
