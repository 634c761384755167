"""The exception an op's checks raise; the verifier turns it into a located
diagnostic. Kept apart so that modules below the IR (compiler/dims.py) can
raise it without importing the IR."""


class VerifyError(Exception):
    """An op is malformed. The verifier turns it into a located diagnostic."""


__all__ = ["VerifyError"]
