"""The HTTP API of the auto-scheduler service (docs/architecture.md, "Service").

    client --HTTP--> api.main.create_app --routes--> workers.store.RedisStore (Redis)
                                                 +--> workers.queues.enqueue_tune (RQ "tune" queue)

Reading guide: ``settings`` (one Settings read once), ``schemas`` (TaskCreate,
TaskPublic, JobPublic, ...), ``errors`` (the library's exceptions mapped to HTTP
status codes once), ``deps`` (Annotated dependencies), ``routes/`` (one router per
resource), ``main`` (``create_app``), ``client`` (a small httpx client).
The API validates DAGs with the pydantic models of their wire format (``dag_schema``: the
structure, and the OpenAPI schema) and ``ComputeDAG.from_json`` (the rest), and otherwise only calls
``workers``; it never compiles or measures anything itself.
"""
