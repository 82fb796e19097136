# tfopt: TensorFlow CPU with oneDNN, the image the pipeline's step pods run.
#
#   make image                       (this machine: podman, base and CA certificates handled;
#                                     container/build-image.sh, docs/container.md)
#   docker build --secret id=extra_ca,src=my-ca.crt -t tfopt:0.1.0 .
#   docker run --rm --cpus 2 -v "$PWD/models:/models:ro" tfopt:0.1.0 inspect /models/digits
#
# It holds what a step pod runs and nothing else: the packages of requirements-image.lock (the
# `pod` extra, at the versions requirements.lock pins for the tests), no test tooling, no
# Airflow, no MLflow server, no caches.

# Where Docker Hub cannot be reached, container/base-image.sh builds a stand-in from Debian's
# archive (the same bookworm and Python 3.11) and the build takes it through this argument.
ARG BASE_IMAGE=python:3.11.15-slim-bookworm

FROM ${BASE_IMAGE} AS build

RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Precompiled bytecode: each pod starts a fresh Python that imports TensorFlow, and compiling its
# thousands of modules at every start would cost seconds per task. No download cache: it would
# only be thrown away with the stage, after costing the build gigabytes.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1 \
    PIP_NO_CACHE_DIR=1

# The packages first, in a layer that only a change of the lock rebuilds. The extra CA
# certificates (a build secret) are trusted by this RUN and the next only.
COPY Makefile pyproject.toml README.md requirements-image.lock ./
COPY container/with-extra-ca.sh /usr/local/bin/with-extra-ca
RUN --mount=type=secret,id=extra_ca with-extra-ca make image-deps

# Then the project, and out go the parts of packages a pod never reads: TensorFlow's C++ headers
# (for compiling custom ops; 0.29 GB) and the packages' own test suites (0.24 GB).
COPY optimizer optimizer
COPY components components
COPY dags dags
RUN --mount=type=secret,id=extra_ca with-extra-ca make image-venv \
    && rm -rf .venv/lib/python3.11/site-packages/tensorflow/include \
    && find .venv/lib/python3.11/site-packages -depth -type d -name tests -exec rm -rf {} +

# The runtime stage gets the project and its virtual environment only: no make, no uv.
FROM ${BASE_IMAGE}

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_ENABLE_ONEDNN_OPTS=1 \
    TF_CPP_MIN_LOG_LEVEL=2

# A numeric USER, so Kubernetes' runAsNonRoot can check it; work/ is where the default config
# writes, and where the pipeline mounts its shared volume. The extra CA certificates are added
# to the system's only when asked (KEEP_EXTRA_CA=yes: pods that reach S3 or MLflow through the
# re-signing network; they then point REQUESTS_CA_BUNDLE and AWS_CA_BUNDLE at the system bundle).
ARG KEEP_EXTRA_CA=no
RUN --mount=type=secret,id=extra_ca \
    useradd --no-log-init --create-home --uid 10001 --user-group tfopt \
    && install -d -o 10001 -g 10001 /app/work \
    && if [ "$KEEP_EXTRA_CA" = yes ] && [ -s /run/secrets/extra_ca ]; then \
        cp /run/secrets/extra_ca /usr/local/share/ca-certificates/extra_ca.crt \
        && update-ca-certificates; \
    fi

COPY --from=build /app /app
WORKDIR /app
USER 10001:10001

# OpenVINO's converter reports usage to Intel unless a consent file in the user's home says no;
# a pipeline converting private models sends nothing.
RUN ["/app/.venv/bin/opt_in_out", "--opt_out"]

# The wrapper sets OMP_NUM_THREADS and TF's intra/inter-op thread counts from the container's
# CPU quota (unless set explicitly), then execs tfopt with the arguments given to the image.
ENTRYPOINT ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]
CMD ["--help"]
