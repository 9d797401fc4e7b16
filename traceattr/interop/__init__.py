"""Bridges to other trace tools. Nothing else in traceattr imports this package; it imports traceattr."""
