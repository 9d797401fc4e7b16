from traceattr.model.traceset import TraceSet

__all__ = ["TraceSet"]
