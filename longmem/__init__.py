"""The ``longmem`` command line: a thin shell over memory_core (and, later, the Ray app)."""
