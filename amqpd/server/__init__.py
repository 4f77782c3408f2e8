"""The only asynchronous code: listener, connections, timers."""
