"""What the tests of the bench scripts share: the message a script's argument parser refuses
bad arguments with."""

import contextlib
import io
import unittest


def refusal(parse_args, argv):
    """What parse_args(argv) prints to stderr; fails the test unless it exits (refuses)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), unittest.TestCase().assertRaises(SystemExit):
        parse_args(argv)
    return stderr.getvalue()
