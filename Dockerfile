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
    && mkdir -p /data /var/lib/waypoint/attempts && chown waypoint /data /var/lib/waypoint/attempts

# The attempt journal (waypoint._activities.journal): a worker restarted after a crash frees the
# steps its dead predecessor left running at once, not after their heartbeat timeout. It must
# be writable by the worker (WORKDIR /app is root's) and outlive the container: mount a volume
# here that its restarts share (docker-compose.yml's worker-attempts; a pod's emptyDir).
ENV WAYPOINT_ATTEMPT_JOURNAL=/var/lib/waypoint/attempts

USER waypoint
CMD ["waypoint", "worker"]
