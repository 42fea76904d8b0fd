# One image for every service of docker-compose.yml: the API, the tune/CPU
# measurement workers and the GPU measurement worker (which gets the device from
# the compose file's NVIDIA reservation, not from this image).
FROM python:3.11-slim

# gcc links each built program into a .so (scheduler_core/runtime/export.py:
# cc -shared ... -lgomp -lm); libgomp1 is the OpenMP runtime those programs and
# LightGBM load.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app

# Only what the package needs (no .git, no virtual environments, no caches).
COPY pyproject.toml README.md ./
COPY scheduler_core ./scheduler_core
COPY sketch_rules ./sketch_rules
COPY cost_model ./cost_model
COPY workers ./workers
COPY api ./api
COPY examples ./examples
RUN pip install -e ".[service]"

# Not root at run time; measurement builds go to the system temp directory.
RUN useradd --create-home --uid 1000 autosched
USER autosched

EXPOSE 8000
CMD ["uvicorn", "api.main:create_app", "--factory", "--host", "0.0.0.0", "--port", "8000"]
