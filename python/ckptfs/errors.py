"""The exceptions: every libckpt failure raises a CkptError subclass chosen by its status code,
carrying the C message (which names the file, key and byte offset)."""

__all__ = ["CkptError", "CkptIOError", "OutOfMemoryError", "FormatError", "UnsupportedError",
           "LimitError", "NotFoundError", "RangeError", "InvalidArgumentError", "ChecksumError",
           "AccessError"]


class CkptError(Exception):
    """A libckpt failure.  `code` is the ckpt_status value, `status` its name
    (`CKPT_E_FORMAT`), `message` the C library's message."""

    code = -1
    status = "CKPT_E_?"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return self.message


class CkptIOError(CkptError):
    """A system call failed (missing or unreadable file; errno in the message)."""
    code, status = 1, "CKPT_E_IO"


class OutOfMemoryError(CkptError):
    code, status = 2, "CKPT_E_NOMEM"


class FormatError(CkptError):
    """Malformed input: pickle, zip, metadata, chunk layout, truncated data."""
    code, status = 3, "CKPT_E_FORMAT"


class UnsupportedError(CkptError):
    code, status = 4, "CKPT_E_UNSUPPORTED"


class LimitError(CkptError):
    """The input exceeds a safety bound (depth, size, count)."""
    code, status = 5, "CKPT_E_LIMIT"


class NotFoundError(CkptError, KeyError):
    """No such checkpoint, key or file."""
    code, status = 6, "CKPT_E_NOTFOUND"


class RangeError(CkptError, IndexError):
    """A byte range or region lies outside its container."""
    code, status = 7, "CKPT_E_RANGE"


class InvalidArgumentError(CkptError, ValueError):
    """The caller passed an invalid argument (a destination tensor of the wrong dtype...)."""
    code, status = 8, "CKPT_E_INVAL"


class ChecksumError(CkptError):
    code, status = 9, "CKPT_E_CHECKSUM"


class AccessError(CkptError, PermissionError):
    code, status = 10, "CKPT_E_ACCESS"


_BY_CODE = {c.code: c for c in (CkptIOError, OutOfMemoryError, FormatError, UnsupportedError,
                                LimitError, NotFoundError, RangeError, InvalidArgumentError,
                                ChecksumError, AccessError)}


def from_status(code, message):
    cls = _BY_CODE.get(code, CkptError)
    return cls(message, code)
