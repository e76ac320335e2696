"""One router per OpenAPI tag; ``ROUTERS`` is what the app mounts under ``/v1``."""

from planner.api.routers import diagnose, estimate, evaluate, gpus, models, plan, timeline, whatif

ROUTERS = (gpus.router, models.router, estimate.router, evaluate.router, plan.router, timeline.router, diagnose.router, whatif.router)
