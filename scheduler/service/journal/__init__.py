"""The durable event journal (issue 35): every event the loop gave its policy and every decision
it got back, recorded in the pass's own transaction, and the twin check that replays it.

``codec`` (the model's dataclasses <-> a stable, versioned JSON form), ``table`` (the journal's
table and all of its SQL: write in the pass, read, prune), ``twin`` (replay under the live config
and policy, first divergence), ``cli`` (``labhive twin check``).
"""
