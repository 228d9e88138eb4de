"""User-facing error types shared by every part of strata."""


class StrataError(Exception):
    """An error for the user: printed as one line, no traceback, exit code 1."""
