"""Notifications: tell approvers what is pending, where they are (webhooks, chat, e-mail).

`config` is the `[notify]` section of the policy, `routing` picks channels for an event, `text`
says what is pending (pure); `channels` delivers (generic signed webhook, apprise) and
`notifier` reads the inbox and results streams on its own durable consumers.
"""
