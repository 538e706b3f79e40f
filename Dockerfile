# One image, two roles (build it with `bash launch.sh image`):
#   - Dataflow worker image: `--sdk_container_image=IMAGE`. Its entrypoint is Beam's SDK harness boot,
#     /opt/apache/beam/boot, inherited from the base image.
#   - Flex Template launcher image: `gcloud dataflow flex-template build --image=IMAGE` (launch.sh template),
#     for two specs: the build's and the compaction's. Dataflow starts the launcher binary copied below in place
#     of the entrypoint; it runs FLEX_TEMPLATE_PYTHON_PY_FILE with the template parameters as --name=value
#     arguments (the compaction spec's `command=compact` makes pipeline/entrypoint.py run compact, not build).
# Launcher, workers and the machine that runs `launch.sh dataflow` must agree on Python (3.11) and Beam
# (2.77.0, pinned in pyproject.toml): the base image fixes both, and the build fails if pip moved either.
ARG BEAM_VERSION=2.77.0
ARG LAUNCHER_IMAGE=gcr.io/dataflow-templates-base/python311-template-launcher-base:latest

FROM ${LAUNCHER_IMAGE} AS template_launcher

FROM apache/beam_python3.11_sdk:${BEAM_VERSION}
ARG BEAM_VERSION

COPY --from=template_launcher /opt/google/dataflow/python_template_launcher \
    /opt/google/dataflow/python_template_launcher

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TF_CPP_MIN_LOG_LEVEL=2

WORKDIR /template
# Only what the package needs (.dockerignore keeps the rest of the context out, .venv and demo/ included).
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY transforms ./transforms
COPY shardsmith ./shardsmith

# The project and its pinned dependencies (tensorflow 2.21, tensorflow-transform 1.21, protobuf) into the
# image's own Python, next to the Beam it ships; then check that nothing conflicts and nothing moved.
RUN pip install "apache-beam[gcp]==${BEAM_VERSION}" /template \
    && pip check \
    && python -c "import sys, apache_beam, google.protobuf, tensorflow_transform, shardsmith, pipeline.cli, transforms.write_shards; \
assert sys.version_info[:2] == (3, 11), sys.version; \
assert apache_beam.__version__ == '${BEAM_VERSION}', apache_beam.__version__; \
print('python', sys.version.split()[0], 'beam', apache_beam.__version__, 'protobuf', google.protobuf.__version__)" \
    && echo 'from pipeline.entrypoint import main; raise SystemExit(main())' > /template/main.py

# The Flex Template launcher runs `python /template/main.py --param=value ...` (pipeline/entrypoint.py).
# Dependencies are already installed above, so no requirements or setup file is named: launching installs
# nothing, and workers use this same image (pass sdk_container_image=IMAGE when running the template).
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py \
    FLEX_TEMPLATE_PYTHON_PY_OPTIONS="" \
    PIP_NO_DEPS=True

# Beam's SDK harness stays the entrypoint, so the image works as --sdk_container_image.
ENTRYPOINT ["/opt/apache/beam/boot"]
