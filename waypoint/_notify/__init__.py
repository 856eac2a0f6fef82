"""Notifications: telling the people a run waits on, where they already are.

Rooms: `config` (the notifications file: channels, routes, delays, validated at start),
`formats` (the inbox card as a webhook body, Slack blocks, a Teams card, an e-mail), `links`
(review links that sign a person in once), `send` (HTTP and SMTP, and which failures sent
nothing), `deliveries` (at most one message per key and channel), `activities` (what the
workflow calls). The workflow decides when; these decide how (docs/notifications.md).
"""
