"""Execution: the numpy reference interpreter and the CPU and CUDA runtimes."""
