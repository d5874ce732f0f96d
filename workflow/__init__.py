"""Headgate: an approval gateway for AI-agent tool calls on NATS JetStream."""

__version__ = "0.1.0"
