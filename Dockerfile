# The Waypoint worker image that docker-compose.yml runs against Temporal on PostgreSQL.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Copied one by one: there is no .dockerignore, and the local .venv must not enter the image.
# The locked dependencies first, in their own layer: exact versions, every file hash-checked.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY waypoint ./waypoint
COPY examples ./examples
RUN pip install --no-cache-dir --no-deps . && useradd --create-home waypoint \
    && mkdir -p /data && chown waypoint /data

USER waypoint
CMD ["waypoint", "worker"]
