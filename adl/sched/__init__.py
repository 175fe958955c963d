"""Pure scheduling logic: goodput model, speedups, policies, simulator.

No I/O, no clocks, no torch.
"""
