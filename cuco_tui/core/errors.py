"""The error a user's own input causes on the command line: one sentence, exit code 2."""


class UsageError(Exception):
    pass
