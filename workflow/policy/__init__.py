"""Pure policy evaluation: classification + proposal + policy -> Verdict.

The entry point is `workflow.policy.engine.evaluate`; loading lives in `workflow.policy.model`.
"""
