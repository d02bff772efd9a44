# releasebot's own image: the bot, its locked dependencies and its migrations; nothing else.
# Multi-stage so that uv and build tooling stay out of the runtime image.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install "uv==0.13.9"
COPY pyproject.toml uv.lock README.md ./
COPY releasebot ./releasebot
COPY migrations ./migrations
# The lock file decides every version (with hashes); the project itself goes in last.
RUN uv export --frozen --no-dev --no-emit-project --output-file requirements.txt \
 && python -m venv /opt/releasebot \
 && /opt/releasebot/bin/pip install --require-hashes -r requirements.txt \
 && /opt/releasebot/bin/pip install --no-deps . \
 && /opt/releasebot/bin/releasebot --version

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/releasebot --create-home releasebot
COPY --from=build /opt/releasebot /opt/releasebot
ENV PATH=/opt/releasebot/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/releasebot
ENTRYPOINT ["releasebot"]
CMD ["plan"]
