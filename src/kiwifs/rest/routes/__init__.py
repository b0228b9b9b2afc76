"""The REST routes under ``/api/kiwi`` and the health probes, one module per kind of resource.

Each module adds its routes to the router (or app) :func:`kiwifs.rest.app.create_app` hands it;
each route parses its input, makes one ``Knowledge`` call in a worker thread and formats the
answer.
"""
