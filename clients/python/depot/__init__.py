"""Python client for depotd (placeholder until the Python client lands)."""

__all__: list[str] = []
