"""Typed errors: one class per gRPC status code the fca.v1 API returns.

Every call of `fca.Client` raises a subclass of `FcaError` instead of a bare
`grpc.RpcError`, so a notebook can write `except fca.NotFound:`. The class is
chosen by the status code alone (proto/fca/v1/audit_service.proto says which
call returns which); the server's message is kept word for word.
"""

import grpc


class FcaError(Exception):
    """A call to fca-server failed; `code` is the grpc.StatusCode."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class InvalidArgument(FcaError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(FcaError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(FcaError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(FcaError, PermissionError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(FcaError, PermissionError):
    code = grpc.StatusCode.UNAUTHENTICATED


class ResourceExhausted(FcaError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(FcaError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(FcaError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(FcaError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(FcaError, NotImplementedError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(FcaError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(FcaError, ConnectionError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(FcaError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(FcaError):
    code = grpc.StatusCode.CANCELLED


class DataLoss(FcaError):
    code = grpc.StatusCode.DATA_LOSS


class JobFailed(FcaError):
    """A job ended FAILED or CANCELLED; `job` is the fca.Job as it ended."""

    def __init__(self, job):
        state = job.state
        message = f"job {job.id} ended {state}" + (f": {job.error}" if job.error else "")
        super().__init__(message, grpc.StatusCode.ABORTED)
        self.job = job

    def __str__(self):
        return self.message


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgument, NotFound, AlreadyExists, PermissionDenied, Unauthenticated,
                ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
                Internal, Unavailable, DeadlineExceeded, Cancelled, DataLoss)
}


def from_rpc_error(error):
    """The FcaError subclass instance for a grpc.RpcError."""
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    cls = _BY_CODE.get(code, FcaError)
    return cls(details or code.name, code)
