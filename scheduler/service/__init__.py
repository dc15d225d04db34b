"""The job service: durable store, lifecycle, REST API, auth and the scheduler loop."""
