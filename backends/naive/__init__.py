"""The naive backend: every GPT-2 op in plain NumPy, written to be read.

This is the textbook and the reference: each file holds one op's forward and backward side by side,
with the math and the derivation of the backward in its docstring (the op specs in euler_core.ops
state the contract). It runs in float32 and float64; the conformance suite checks every other
backend against it in float64. It favours clarity over speed: it materialises the T x T attention
matrix and makes temporaries freely.
"""
