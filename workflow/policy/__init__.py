"""Pure policy evaluation: classification + proposal + policy -> Verdict.

The entry point is `workflow.policy.engine.evaluate`. The file's sections are
`workflow.policy.schema`, the whole policy `workflow.policy.model`, its rules
`workflow.policy.rules`, and reading one `workflow.policy.load`.
"""
