"""Operator fusion: the `fuse` pass, its phases and its cost model.

See `fuse.py` for the pipeline and the contract with the lowerings, and
`cost_model.py` for how each decision is made.
"""
