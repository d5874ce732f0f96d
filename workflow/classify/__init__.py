"""Pure risk classification: proposal (+ tables) -> Classification.

No I/O and no clock. The entry point is `workflow.classify.engine.classify`; this package
init imports nothing so that `workflow.messages` can use the taxonomy without a cycle.
"""
