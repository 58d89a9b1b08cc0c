"""Errors that name what the user got wrong and what to do; the CLI prints them without a traceback."""
from __future__ import annotations


class UserError(Exception):
    exit_code = 2

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


class RuleError(UserError):
    """A rule file that cannot be loaded: bad syntax, unknown metric, missing field."""
