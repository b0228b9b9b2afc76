"""The REST interface (FastAPI): the app and its routes, HTTP plumbing, the OpenAPI document,
start-up and shutdown for ``kiwifs serve``, and the read-only web pages (``web/``).
"""
