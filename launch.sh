#!/usr/bin/env bash
# shardsmith's bootstrap: makes .venv (Python 3.11, shardsmith, its test tools) on first use and runs what needs
# it. The Google Cloud commands are Python (pipeline/cloud/); this script only hands them over.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SHARDSMITH_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-}"
DEMO_DIR="${SHARDSMITH_DEMO_DIR:-$ROOT/demo}"
AIRFLOW_VENV="${SHARDSMITH_AIRFLOW_VENV:-$ROOT/.venv-airflow}"
# Airflow and its Google and Beam providers, pinned together; they live apart from .venv because the Google
# provider needs google-api-python-client >=2 and tfx-bsl (tensorflow-transform) needs <2.
AIRFLOW_PACKAGES=("apache-airflow==3.3.2" "apache-airflow-providers-google==22.8.0"
  "apache-airflow-providers-apache-beam==6.3.1")

usage() {
  cat <<'EOF'
usage: bash launch.sh COMMAND [ARGS...]

commands:
  demo            make the demo dataset (demo/data) and build it into demo/tfrecords
  local ARGS...   run `shardsmith build ARGS...` on the local runner (Beam's FnApiRunner)
  test [ARGS...]  ruff, then the test suite (extra ARGS go to pytest)
  install         only create .venv and install shardsmith with its test tools
  airflow-env     create the Airflow virtualenv (.venv-airflow) that tests/examples/airflow/test_airflow_dags.py uses
  readers-env     create .venv-readers: the readers and torch, without Beam, TensorFlow or tf.transform
  -h, --help      this help

Google Cloud (the same as `shardsmith COMMAND`, from pipeline/cloud/); their settings (project, region, bucket,
image, workers, ...: a flag, an environment variable or a --config file), --dry-run and details:
`bash launch.sh COMMAND --help`
  image           build the container image (Dataflow workers and Flex Template launcher) and push it
  dataflow ARGS   run `shardsmith build ARGS...` on Dataflow, its workers in the container image
  template        build the Flex Template spec file (on gs://) from the image and
                  pipeline/options/flex_template_metadata.json
  run-template ARGS
                  launch a Dataflow job from the Flex Template; build flags become template parameters

environment:
  PYTHON           the Python 3.11 interpreter to build .venv with (default: python3.11, else python3)
  SHARDSMITH_VENV  where the virtual environment lives (default: .venv in this folder)
  SHARDSMITH_AIRFLOW_VENV
                   where airflow-env installs Airflow (default: .venv-airflow in this folder)
  SHARDSMITH_TEST_WORKERS  `test`'s pytest workers (default: auto, one per core; 0: one process)
EOF
}

die() { echo "launch.sh: $*" >&2; exit 2; }

# " (did you mean 'X'?)" for the command nearest $1 (at most 2 edits away; Levenshtein in awk), else nothing.
suggest() {
  awk -v w="$1" 'BEGIN { n = split("demo local test install image dataflow template run-template airflow-env", c)
    best = 3; lw = length(w); for (y = 0; y <= lw; y++) d[0, y] = y
    for (i = 1; i <= n; i++) { la = length(c[i]); for (x = 1; x <= la; x++) { d[x, 0] = x; for (y = 1; y <= lw; y++) {
      k = d[x-1, y-1] + (substr(c[i], x, 1) != substr(w, y, 1)); if (d[x-1, y] + 1 < k) k = d[x-1, y] + 1
      if (d[x, y-1] + 1 < k) k = d[x, y-1] + 1; d[x, y] = k } } if (d[la, lw] < best) { best = d[la, lw]; m = c[i] } }
    if (m != "") printf " (did you mean \047%s\047?)", m }'
}

find_python() {
  if [[ -n "$PYTHON_BIN" ]]; then echo "$PYTHON_BIN"; return; fi
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  die "no python3 found; install Python 3.11 or set PYTHON"
}

ensure_venv() {
  local stamp="$VENV/.shardsmith-installed" want
  want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then return; fi
  local python; python="$(find_python)"
  local version; version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [[ "$version" == "3.11" ]] || die "shardsmith needs Python 3.11 (tensorflow-transform 1.21), $python is $version; set PYTHON"
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "launch.sh: creating $VENV" >&2
    "$python" -m venv "$VENV"
  fi
  echo "launch.sh: installing shardsmith and its test tools into $VENV (first run: a few minutes)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  echo "$want" > "$stamp"
}

cmd_demo() {
  ensure_venv
  [[ -f "$DEMO_DIR/data/manifest.csv" ]] || "$VENV/bin/shardsmith" sample "$DEMO_DIR/data"
  "$VENV/bin/shardsmith" build --manifest "$DEMO_DIR/data/manifest.csv" --output_dir "$DEMO_DIR/tfrecords" \
    --name demo --num_shards train=4,validation=2,test=2 --max_error_fraction 0.1 --overwrite "$@"
}

cmd_local() {
  ensure_venv
  [[ $# -gt 0 ]] || die "local needs build arguments, e.g. --manifest M --output_dir D --name N (see: shardsmith build --help)"
  "$VENV/bin/shardsmith" build "$@"
}

cmd_test() {
  ensure_venv
  cd "$ROOT"
  "$VENV/bin/ruff" check .
  # A worker per core; a file's tests share one, so its module fixtures are built once.
  "$VENV/bin/python" -m pytest -n "${SHARDSMITH_TEST_WORKERS:-auto}" --dist loadfile "$@"
}

# image, dataflow, template and run-template are Python (pipeline/cloud/, also `shardsmith COMMAND`). It needs only
# the standard library, so without .venv it runs on the system Python: dry runs and help make no .venv. A real
# `dataflow` run builds in .venv: pipeline.cloud checks the arguments, then has this script `install` it.
cmd_cloud() {
  local python="$VENV/bin/python"
  [[ -x "$python" ]] || python="$(find_python)"
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m pipeline.cloud \
    "--launcher=$ROOT/launch.sh" "--python=$VENV/bin/python" "$@"
}

cmd_airflow_env() {
  [[ $# -eq 0 ]] || die "airflow-env takes no arguments (SHARDSMITH_AIRFLOW_VENV sets where it goes)"
  local stamp="$AIRFLOW_VENV/.shardsmith-airflow-installed" want="${AIRFLOW_PACKAGES[*]}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then echo "launch.sh: $AIRFLOW_VENV is up to date" >&2; return; fi
  local python; python="$(find_python)"
  if [[ ! -x "$AIRFLOW_VENV/bin/python" ]]; then
    echo "launch.sh: creating $AIRFLOW_VENV" >&2
    "$python" -m venv "$AIRFLOW_VENV"
    echo '*' > "$AIRFLOW_VENV/.gitignore"  # keeps git, ruff and gcloud builds out of it
  fi
  echo "launch.sh: installing ${AIRFLOW_PACKAGES[*]} into $AIRFLOW_VENV (a few minutes)" >&2
  "$AIRFLOW_VENV/bin/python" -m pip install --quiet --upgrade pip
  "$AIRFLOW_VENV/bin/python" -m pip install --quiet "${AIRFLOW_PACKAGES[@]}"
  echo "$want" > "$stamp"
}

main() {
  local command="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$command" in
    demo) cmd_demo "$@" ;;
    local) cmd_local "$@" ;;
    test) cmd_test "$@" ;;
    install) ensure_venv ;;
    image|dataflow|template|run-template) cmd_cloud "$command" "$@" ;;
    airflow-env) cmd_airflow_env "$@" ;;
    readers-env) PYTHONPATH="$ROOT" exec "$(find_python)" -m pipeline.readers_env "$@" ;;  # standard library only
    -h|--help|help) usage ;;
    "") usage; exit 2 ;;
    *) die "unknown command '$command'$(suggest "$command"); see bash launch.sh --help" ;;
  esac
}

main "$@"
