"""The REST API's handlers, one module per resource, as importable module-level functions.

Each handler takes the ``JobService`` facade by FastAPI dependency injection (``deps.Jobs``)
instead of closing over a service inside a ``register`` function, so a handler can be read,
imported and called on its own; the facade owns every transaction. ``create_app`` adds the
resources' routes to the app itself (no nested routers to match through), in the order of
``RESOURCES``, which is the order of the OpenAPI document's paths.
"""

from labhive.scheduler.service.api import cluster, jobs, me, notices, public, queue

#: The resources in the order their routes are added (``public`` last, as before the move).
RESOURCES = (me, jobs, notices, queue, cluster, public)
