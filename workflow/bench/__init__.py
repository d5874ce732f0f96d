"""`headgate bench`: Headgate measured against a bare JetStream relay on the same server.

- `relay`: the baseline, the fastest pass-through through JetStream written with nats-py alone
  (batch fetch from a durable pull consumer, pipelined `publish_async` with `Nats-Msg-Id`, ack).
- `load`: the load generator (a mix of proposals at a fixed rate or at full speed under a window),
  the result observer and the bot approver.
- `procs`: the processes under test (service and relay as subprocesses, so their CPU time and
  memory are their own) and /proc accounting.
- `stats`: percentiles and medians.
- `runner`: rounds, phases, the soak and the JSON report.
"""
