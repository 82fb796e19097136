# tfopt: TensorFlow CPU with oneDNN, the image the pipeline's containerized tasks run.
#
#   docker build -t tfopt:0.1.0 .
#   docker run --rm --cpus 2 -v "$PWD/models:/models" tfopt:0.1.0 inspect /models/digits
#
# The build runs `make install`, the same command `make test` runs first: every package at the
# version pinned in requirements.lock, then the project itself.

FROM python:3.11.15-slim-bookworm AS build

RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . .

# Precompiled bytecode: each pod starts a fresh Python that imports TensorFlow, and compiling its
# thousands of modules at every start would cost seconds per task.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    PIP_NO_CACHE_DIR=1

RUN make install

# The runtime stage gets the project and its virtual environment only: no make, no caches.
FROM python:3.11.15-slim-bookworm

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_ENABLE_ONEDNN_OPTS=1 \
    TF_CPP_MIN_LOG_LEVEL=2

# A numeric USER, so Kubernetes' runAsNonRoot can check it; work/ is where the default config
# writes, and where the pipeline mounts its shared volume.
RUN useradd --no-log-init --create-home --uid 10001 --user-group tfopt \
    && install -d -o 10001 -g 10001 /app/work

COPY --from=build /app /app
WORKDIR /app
USER 10001:10001

# OpenVINO's converter reports usage to Intel unless a consent file in the user's home says no;
# a pipeline converting private models sends nothing.
RUN ["/app/.venv/bin/opt_in_out", "--opt_out"]

# The wrapper sets OMP_NUM_THREADS and TF's intra/inter-op thread counts from the container's
# CPU quota (unless set explicitly), then execs tfopt with the arguments given to the image.
ENTRYPOINT ["python", "-m", "components.container_entrypoint", "tfopt"]
CMD ["--help"]
