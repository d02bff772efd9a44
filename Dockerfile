# releasebot's own image: the bot, its locked dependencies and its migrations; nothing else.
#
# Two stages: uv and the build backend stay in `build`; the runtime stage receives only the
# finished virtual environment (/opt/releasebot), so the image is the Python base plus the
# dependencies. It runs as UID/GID 10001 and works with a read-only root filesystem (the
# manifests mount /tmp, and /var/lib/releasebot for SQLite).
#
# Base image: an exact Python patch release on an exact Debian release, never a floating
# tag. For production, pin it by digest too (a tag can be re-pushed, a digest cannot):
#   docker build --build-arg PYTHON_IMAGE=python:3.11.14-slim-trixie@sha256:<digest> .
# and get <digest> from `docker buildx imagetools inspect python:3.11.14-slim-trixie` or
# `crane digest python:3.11.14-slim-trixie` (the index digest, valid for every arch).
# Both stages must use the same image: the venv's python is a link to the base's.
#
# No HEALTHCHECK: Kubernetes ignores it (the kubelet runs the Deployment's probes on
# /healthz and /readyz instead), and the OCI image format does not even carry it.
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_NO_CACHE=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PROJECT_ENVIRONMENT=/opt/releasebot
# The same uv as .ci/run uses.
RUN pip install "uv==0.13.9"
WORKDIR /src
# Dependencies first, from uv.lock exactly (hash-checked, --frozen: never re-resolved), in a
# layer of their own that a code change does not invalidate. With every cloud's credential
# library (the extras aws, gcp, azure: registry.auth = "ecr", "gcp", "azure"), so one image
# runs on any of them.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project --extra aws --extra gcp --extra azure
# Then releasebot itself, built as a wheel and installed (--no-editable), so the venv needs
# no source tree; the wheel carries migrations/ as releasebot/_migrations.
COPY README.md ./
COPY releasebot ./releasebot
COPY migrations ./migrations
# The checks: the entry point runs, and the INSTALLED package (python -I: not ./releasebot)
# finds its packaged migrations and can migrate a scratch database to head.
RUN uv sync --frozen --no-dev --no-editable --extra aws --extra gcp --extra azure \
 && /opt/releasebot/bin/releasebot --version \
 && /opt/releasebot/bin/python -I -c "import boto3, google.auth, azure.identity" \
 && /opt/releasebot/bin/python -I -c "from releasebot.store import migrate; assert migrate.migrations_dir().parent.name == 'releasebot', migrate.migrations_dir()" \
 && RELEASEBOT_DATABASE_URL=sqlite:////tmp/smoke.db /opt/releasebot/bin/releasebot db upgrade \
 && rm -f /tmp/smoke.db*

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="releasebot" \
      org.opencontainers.image.description="Keeps NVIDIA driver images ready for every Flatcar version a GPU fleet runs" \
      org.opencontainers.image.licenses="Apache-2.0"
# pip, setuptools and wheel are not needed to run releasebot (its venv has none either):
# fewer packages, fewer scanner findings. The user owns only its state directory.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
 && groupadd --system --gid 10001 releasebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /var/lib/releasebot --shell /usr/sbin/nologin releasebot \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/releasebot
COPY --from=build /opt/releasebot /opt/releasebot
# Bytecode was compiled at build time; nothing may be written next to the code at run time.
ENV PATH=/opt/releasebot/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/var/lib/releasebot
USER 10001:10001
WORKDIR /var/lib/releasebot
# Smoke test as the runtime user: the entry point starts and finds its package.
RUN releasebot --version
EXPOSE 8080
# releasebot is PID 1: `run` handles SIGTERM itself (graceful shutdown). Kubernetes passes
# the arguments (`run --config …`, `reconcile --once --config …`); `run` is the default.
ENTRYPOINT ["releasebot"]
CMD ["run"]
