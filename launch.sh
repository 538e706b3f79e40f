#!/usr/bin/env bash
# shardsmith's single entry point. Each subcommand installs what it needs into .venv on first use.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${SHARDSMITH_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-}"
DEMO_DIR="${SHARDSMITH_DEMO_DIR:-$ROOT/demo}"
AIRFLOW_VENV="${SHARDSMITH_AIRFLOW_VENV:-$ROOT/.venv-airflow}"
# Airflow and its Google and Beam providers, pinned together; they live apart from .venv because the Google
# provider needs google-api-python-client >=2 and tfx-bsl (tensorflow-transform) needs <2.
AIRFLOW_PACKAGES=(
  "apache-airflow==3.3.2"
  "apache-airflow-providers-google==22.8.0"
  "apache-airflow-providers-apache-beam==6.3.1"
)

usage() {
  cat <<'EOF'
usage: bash launch.sh COMMAND [ARGS...]

commands:
  demo            make the demo dataset (demo/data) and build it into demo/tfrecords
  local ARGS...   run `shardsmith build ARGS...` on the local runner (Beam's FnApiRunner)
  test [ARGS...]  ruff, then the test suite (extra ARGS go to pytest)
  install         only create .venv and install shardsmith with its test tools
  image           build the container image (Dataflow workers and Flex Template launcher) and push it
  dataflow ARGS   run `shardsmith build ARGS...` on Dataflow, its workers in the container image
  template        build the Flex Template spec file (on gs://) from the image and
                  pipeline/flex_template_metadata.json
  run-template ARGS
                  launch a Dataflow job from the Flex Template; build flags become template parameters
  airflow-env     create the Airflow virtualenv (.venv-airflow) that tests/test_airflow_dags.py uses
  -h, --help      this help

settings of image, dataflow, template and run-template: the flag, else the environment variable, else the
line KEY=VALUE in the --config file (shell-style: # comments, blank lines, optional `export` and quotes;
read, never executed). Flags take `--flag VALUE` or `--flag=VALUE`.

  flag                   variable / config key        default
  --project P            SHARDSMITH_PROJECT           required
  --region R             SHARDSMITH_REGION            required (e.g. us-central1)
  --bucket B             SHARDSMITH_BUCKET            required, unless every gs:// location below is given
  --temp_location GS     SHARDSMITH_TEMP_LOCATION     gs://B/shardsmith/temp
  --staging_location GS  SHARDSMITH_STAGING_LOCATION  gs://B/shardsmith/staging
  --template_file GS     SHARDSMITH_TEMPLATE_FILE     gs://B/shardsmith/templates/shardsmith-TAG.json
  --image IMAGE          SHARDSMITH_IMAGE             R-docker.pkg.dev/P/REPOSITORY/shardsmith:TAG
  --repository NAME      SHARDSMITH_REPOSITORY        shardsmith (an Artifact Registry Docker repository)
  --tag TAG              SHARDSMITH_IMAGE_TAG         the git commit (12 hex digits), else the package version
  --builder KIND         SHARDSMITH_BUILDER           cloudbuild (gcloud builds submit) or docker
  --service_account SA   SHARDSMITH_SERVICE_ACCOUNT   Dataflow's default (the Compute Engine default account)
  --machine_type TYPE    SHARDSMITH_MACHINE_TYPE      Dataflow's default
  --max_workers N        SHARDSMITH_MAX_WORKERS       Dataflow's default (the autoscaling ceiling)
  --num_workers N        SHARDSMITH_NUM_WORKERS       Dataflow's default (workers at start)
  --network NET          SHARDSMITH_NETWORK           Dataflow's default
  --subnetwork SUB       SHARDSMITH_SUBNETWORK        Dataflow's default (regions/R/subnetworks/NAME or a URL)
  --no_public_ips        SHARDSMITH_NO_PUBLIC_IPS     false (true: the subnetwork needs Private Google Access)
  --job_name NAME        SHARDSMITH_JOB_NAME          shardsmith-YYYYMMDD-HHMMSS (UTC)
  --labels K=V,K2=V2     SHARDSMITH_LABELS            none (Dataflow job labels)
  --config FILE          SHARDSMITH_CONFIG            none
  --dry-run              SHARDSMITH_DRY_RUN           false; true prints the exact commands (gcloud, docker,
                                                      python), one a line, runs nothing and creates no .venv
  Beam's names are accepted too: --max_num_workers, --service_account_email, --worker_machine_type,
  --sdk_container_image, --no_use_public_ips. A missing required setting exits 2 with one line naming it.

  dataflow ARGS: every other argument goes to `shardsmith build`: --manifest gs://..., --output_dir gs://...,
    --name, ... and Beam flags. The command waits until the job finishes (what Airflow and other schedulers
    need) and logs the job id and console URL as soon as the job is created; add --no_wait_until_finish to
    return once it is submitted. The launching machine lists the manifests and checks the output folder;
    it reads no row and no image: Dataflow's workers do.
  run-template ARGS: the template parameters as build flags (--manifest, --output_dir, --name, ...; see
    pipeline/flex_template_metadata.json). A repeated --manifest, --path_map or --feature is joined with commas and
    --overwrite becomes overwrite=true. Workers run in --image. The command returns once the job is launched.

environment:
  PYTHON           the Python 3.11 interpreter to build .venv with (default: python3.11, else python3)
  SHARDSMITH_VENV  where the virtual environment lives (default: .venv in this folder)
  SHARDSMITH_AIRFLOW_VENV
                   where airflow-env installs Airflow (default: .venv-airflow in this folder)
EOF
}

die() { echo "launch.sh: $*" >&2; exit 2; }

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
  if [[ ! -f "$DEMO_DIR/data/manifest.csv" ]]; then
    "$VENV/bin/shardsmith" sample "$DEMO_DIR/data"
  fi
  "$VENV/bin/shardsmith" build \
    --manifest "$DEMO_DIR/data/manifest.csv" \
    --output_dir "$DEMO_DIR/tfrecords" \
    --name demo \
    --num_shards train=4,validation=2,test=2 \
    --max_error_fraction 0.1 \
    --overwrite "$@"
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
  "$VENV/bin/python" -m pytest "$@"
}

# ---------------------------------------------------------------------------------------------------------
# Dataflow: image, dataflow, template, run-template. Settings come from flags (FLAG_<KEY>), the environment
# (SHARDSMITH_<KEY>) and a config file (FILE_<KEY>), in that order. Plain variables, no associative arrays,
# so the macOS /bin/bash (3.2) runs this too.

SETTING_KEYS=(PROJECT REGION BUCKET TEMP_LOCATION STAGING_LOCATION TEMPLATE_FILE IMAGE REPOSITORY IMAGE_TAG
  BUILDER SERVICE_ACCOUNT MACHINE_TYPE MAX_WORKERS NUM_WORKERS NETWORK SUBNETWORK NO_PUBLIC_IPS JOB_NAME LABELS)
# The Flex Template's parameters, as declared in pipeline/flex_template_metadata.json (a test keeps them equal).
TEMPLATE_PARAMETERS=" manifest output_dir name split_column uri_column label_column task list_delimiter mask_column feature path_map allowed_prefixes
  split_ratios seed num_shards target_shard_mb compression image_mode max_side reencode jpeg_quality overwrite keep_builds break_lock validate on_duplicate max_error_fraction
  max_image_bytes max_pixels temp_dir "
TEMPLATE_LIST_PARAMETERS=" manifest path_map feature "
METADATA_FILE="$ROOT/pipeline/flex_template_metadata.json"
COMMAND=""
DRY_RUN=""
CONFIG_FILE=""
PASS=()

# flag name (dashes or underscores) -> setting key; nothing for flags that are not settings
flag_key() {
  case "${1//-/_}" in
    project) echo PROJECT ;;
    region) echo REGION ;;
    bucket) echo BUCKET ;;
    temp_location) echo TEMP_LOCATION ;;
    staging_location) echo STAGING_LOCATION ;;
    template_file) echo TEMPLATE_FILE ;;
    image|sdk_container_image) echo IMAGE ;;
    repository) echo REPOSITORY ;;
    tag|image_tag) echo IMAGE_TAG ;;
    builder) echo BUILDER ;;
    service_account|service_account_email) echo SERVICE_ACCOUNT ;;
    machine_type|worker_machine_type) echo MACHINE_TYPE ;;
    max_workers|max_num_workers) echo MAX_WORKERS ;;
    num_workers) echo NUM_WORKERS ;;
    network) echo NETWORK ;;
    subnetwork) echo SUBNETWORK ;;
    no_public_ips|no_use_public_ips) echo NO_PUBLIC_IPS ;;
    job_name) echo JOB_NAME ;;
    labels) echo LABELS ;;
  esac
}

is_setting_key() {
  local key
  for key in "${SETTING_KEYS[@]}"; do [[ "$key" == "$1" ]] && return 0; done
  return 1
}

is_true() { [[ "$(echo "${1:-}" | tr '[:upper:]' '[:lower:]')" =~ ^(true|1|yes)$ ]]; }

# setting KEY: the flag's value, else $SHARDSMITH_KEY, else the config file's; empty when none
setting() {
  local name
  for name in "FLAG_$1" "SHARDSMITH_$1" "FILE_$1"; do
    if [[ -n "${!name:-}" ]]; then printf '%s' "${!name}"; return 0; fi
  done
  return 0
}

read_config() {
  local file="$1" line key value number=0
  local double_quoted='^"(.*)"[[:space:]]*$' single_quoted="^'(.*)'[[:space:]]*\$"
  local assignment='^([A-Za-z_][A-Za-z0-9_]*)=(.*)$'
  [[ -f "$file" ]] || die "$COMMAND: config file not found: $file"
  while IFS= read -r line || [[ -n "$line" ]]; do
    number=$((number + 1))
    line="${line#"${line%%[![:space:]]*}"}"
    [[ -z "$line" || "$line" == \#* ]] && continue
    line="${line#export }"
    [[ "$line" =~ $assignment ]] || die "$COMMAND: $file:$number: expected KEY=VALUE, got: $line"
    key="${BASH_REMATCH[1]}"
    value="${BASH_REMATCH[2]}"
    if [[ "$value" =~ $double_quoted || "$value" =~ $single_quoted ]]; then
      value="${BASH_REMATCH[1]}"
    else
      value="${value%%[[:space:]]#*}"
      value="${value%"${value##*[![:space:]]}"}"
    fi
    key="${key#SHARDSMITH_}"
    is_setting_key "$key" || die "$COMMAND: $file:$number: unknown setting $key (see: bash launch.sh --help)"
    printf -v "FILE_$key" '%s' "$value"
  done < "$file"
}

parse_cloud_args() {
  local arg name value has_value key
  while [[ $# -gt 0 ]]; do
    arg="$1"
    shift
    case "$arg" in
      -h|--help) usage; exit 0 ;;
      --dry-run|--dry_run) DRY_RUN=true; continue ;;
      --) PASS+=("$@"); break ;;
    esac
    if [[ "$arg" != --* ]]; then PASS+=("$arg"); continue; fi
    name="${arg#--}"
    value=""
    has_value=""
    if [[ "$name" == *=* ]]; then value="${name#*=}"; name="${name%%=*}"; has_value=1; fi
    if [[ "${name//-/_}" == config ]]; then
      if [[ -z "$has_value" ]]; then
        [[ $# -gt 0 ]] || die "$COMMAND: --config needs a file"
        value="$1"; shift
      fi
      CONFIG_FILE="$value"
      continue
    fi
    key="$(flag_key "$name")"
    if [[ -z "$key" ]]; then PASS+=("$arg"); continue; fi
    if [[ "$key" == NO_PUBLIC_IPS ]]; then
      [[ -n "$has_value" ]] || value=true
      is_true "$value" && value=true || value=false
    elif [[ -z "$has_value" ]]; then
      [[ $# -gt 0 ]] || die "$COMMAND: --$name needs a value"
      value="$1"; shift
    fi
    if [[ "$key" == LABELS && -n "${FLAG_LABELS:-}" ]]; then value="$FLAG_LABELS,$value"; fi
    printf -v "FLAG_$key" '%s' "$value"
  done
}

# One line per command: the words as a shell reads them back (plain, or single-quoted when needed).
show_command() {
  local word out=() safe='^[A-Za-z0-9_@%+=:,./^-]+$'
  for word in "$@"; do
    if [[ "$word" =~ $safe ]]; then out+=("$word"); else out+=("'${word//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}

run_step() {
  if [[ -n "$DRY_RUN" ]]; then show_command "$@"; else echo "launch.sh: $(show_command "$@")" >&2; "$@"; fi
}

default_tag() {
  local commit
  if commit="$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null)" && [[ -n "$commit" ]]; then
    echo "$commit"
  else
    sed -n 's/^version *= *"\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1
  fi
}

# Whether this command needs a location that is derived from the bucket and was not given outright.
needs_bucket() {
  case "$COMMAND" in
    dataflow) [[ -z "$S_TEMP_LOCATION" || -z "$S_STAGING_LOCATION" ]] ;;
    template) [[ -z "$S_TEMPLATE_FILE" ]] ;;
    run-template) [[ -z "$S_TEMPLATE_FILE" || -z "$S_TEMP_LOCATION" || -z "$S_STAGING_LOCATION" ]] ;;
    *) return 1 ;;
  esac
}

# Resolves every setting into S_<KEY>; the arguments name the ones this command cannot do without
# (project, region, bucket; image: a given image, else project and region to name the default one).
resolve_settings() {
  local key need value missing=() flags=() vars=()
  for key in "${SETTING_KEYS[@]}"; do printf -v "S_$key" '%s' "$(setting "$key")"; done
  S_REPOSITORY="${S_REPOSITORY:-shardsmith}"
  S_BUILDER="${S_BUILDER:-cloudbuild}"
  S_IMAGE_TAG="${S_IMAGE_TAG:-$(default_tag)}"
  if is_true "$S_NO_PUBLIC_IPS"; then S_NO_PUBLIC_IPS=true; else S_NO_PUBLIC_IPS=""; fi
  for need in "$@"; do
    case "$need" in
      bucket) needs_bucket || continue ;;
      image)
        [[ -z "$S_IMAGE" ]] || continue
        if [[ -z "$S_PROJECT" ]]; then need=project; else need=region; fi ;;
    esac
    key="$(echo "$need" | tr '[:lower:]' '[:upper:]')"
    value="S_$key"
    if [[ -z "${!value}" && " ${missing[*]-} " != *" $need "* ]]; then
      missing+=("$need")
      flags+=("--$need")
      vars+=("SHARDSMITH_$key")
    fi
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    local names="${missing[*]}" how="${flags[*]}" variables="${vars[*]}"
    die "$COMMAND: missing setting: ${names// /, } (pass ${how// /, }; or set ${variables// /, }; or put it in a --config file)"
  fi
  S_BUCKET="${S_BUCKET#gs://}"
  S_BUCKET="${S_BUCKET%/}"
  if [[ -n "$S_BUCKET" ]]; then
    S_TEMP_LOCATION="${S_TEMP_LOCATION:-gs://$S_BUCKET/shardsmith/temp}"
    S_STAGING_LOCATION="${S_STAGING_LOCATION:-gs://$S_BUCKET/shardsmith/staging}"
    S_TEMPLATE_FILE="${S_TEMPLATE_FILE:-gs://$S_BUCKET/shardsmith/templates/shardsmith-$S_IMAGE_TAG.json}"
  fi
  if [[ -z "$S_IMAGE" && -n "$S_PROJECT" && -n "$S_REGION" ]]; then
    S_IMAGE="$S_REGION-docker.pkg.dev/$S_PROJECT/$S_REPOSITORY/shardsmith:$S_IMAGE_TAG"
  fi
  if [[ -z "$S_JOB_NAME" ]]; then S_JOB_NAME="shardsmith-$(date -u +%Y%m%d-%H%M%S)"; fi
  validate_settings
}

validate_settings() {
  local label location
  [[ "$S_JOB_NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] \
    || die "$COMMAND: --job_name '$S_JOB_NAME' must be lowercase letters, digits and '-', starting with a letter"
  for location in "$S_TEMP_LOCATION" "$S_STAGING_LOCATION" "$S_TEMPLATE_FILE"; do
    [[ -z "$location" || "$location" =~ ^gs://[a-z0-9][-_.a-z0-9]+[a-z0-9](/.*)?$ ]] \
      || die "$COMMAND: '$location' must be a gs://BUCKET/PATH location (bucket names: 3-63 characters)"
  done
  [[ -z "$S_MAX_WORKERS" || "$S_MAX_WORKERS" =~ ^[1-9][0-9]*$ ]] \
    || die "$COMMAND: --max_workers must be a positive whole number, got '$S_MAX_WORKERS'"
  [[ -z "$S_NUM_WORKERS" || "$S_NUM_WORKERS" =~ ^[1-9][0-9]*$ ]] \
    || die "$COMMAND: --num_workers must be a positive whole number, got '$S_NUM_WORKERS'"
  [[ "$S_BUILDER" == cloudbuild || "$S_BUILDER" == docker ]] \
    || die "$COMMAND: --builder must be cloudbuild or docker, got '$S_BUILDER'"
  if [[ -n "$S_LABELS" ]]; then
    local labels
    IFS=, read -r -a labels <<< "$S_LABELS"
    for label in "${labels[@]}"; do
      [[ "$label" =~ ^[a-z][-_a-z0-9]{0,62}=[-_a-z0-9]{0,63}$ ]] \
        || die "$COMMAND: label '$label' must be key=value in lowercase letters, digits, '-' and '_'"
    done
  fi
}

# The value of a build flag in PASS (the last one), for the gs:// checks below.
pass_values() {
  local flag="$1" i=0 arg
  while [[ $i -lt ${#PASS[@]} ]]; do
    arg="${PASS[$i]}"
    if [[ "$arg" == "--$flag="* ]]; then echo "${arg#*=}"
    elif [[ "$arg" == "--$flag" && $((i + 1)) -lt ${#PASS[@]} ]]; then echo "${PASS[$((i + 1))]}"
    fi
    i=$((i + 1))
  done
}

require_remote_paths() {
  local flag value
  for flag in manifest output_dir; do
    while IFS= read -r value; do
      [[ -z "$value" || "$value" == gs://* ]] \
        || die "$COMMAND: --$flag $value: Dataflow workers read and write Cloud Storage only; use a gs:// path"
    done < <(pass_values "$flag")
  done
}

cmd_image() {
  resolve_settings image
  [[ ${#PASS[@]} -eq 0 ]] || die "image: unexpected argument: ${PASS[0]}"
  if [[ "$S_BUILDER" == cloudbuild ]]; then
    resolve_settings project region
    # Cloud Build builds the Dockerfile in the cloud and pushes the image; TensorFlow makes a big layer.
    run_step gcloud builds submit "$ROOT" "--project=$S_PROJECT" "--region=$S_REGION" "--tag=$S_IMAGE" \
      --timeout=3600s --machine-type=e2-highcpu-8 --ignore-file=.dockerignore
  else
    local host="${S_IMAGE%%/*}"
    if [[ "$host" == *.pkg.dev || "$host" == *gcr.io ]]; then
      run_step gcloud auth configure-docker "$host" --quiet
    fi
    # Dataflow workers are x86-64: build for that platform whatever the local machine is.
    run_step docker build --platform=linux/amd64 "--tag=$S_IMAGE" "$ROOT"
    run_step docker push "$S_IMAGE"
  fi
}

cmd_dataflow() {
  resolve_settings project region bucket image
  require_remote_paths
  local cmd=("$VENV/bin/python" -m pipeline build ${PASS[@]+"${PASS[@]}"}
    --runner=DataflowRunner "--project=$S_PROJECT" "--region=$S_REGION"
    "--temp_location=$S_TEMP_LOCATION" "--staging_location=$S_STAGING_LOCATION"
    "--sdk_container_image=$S_IMAGE" "--job_name=$S_JOB_NAME")
  [[ -z "$S_SERVICE_ACCOUNT" ]] || cmd+=("--service_account_email=$S_SERVICE_ACCOUNT")
  [[ -z "$S_MACHINE_TYPE" ]] || cmd+=("--machine_type=$S_MACHINE_TYPE")
  [[ -z "$S_NUM_WORKERS" ]] || cmd+=("--num_workers=$S_NUM_WORKERS")
  [[ -z "$S_MAX_WORKERS" ]] || cmd+=("--max_num_workers=$S_MAX_WORKERS")
  [[ -z "$S_NETWORK" ]] || cmd+=("--network=$S_NETWORK")
  [[ -z "$S_SUBNETWORK" ]] || cmd+=("--subnetwork=$S_SUBNETWORK")
  [[ -z "$S_NO_PUBLIC_IPS" ]] || cmd+=(--no_use_public_ips)
  if [[ -n "$S_LABELS" ]]; then
    local labels label
    IFS=, read -r -a labels <<< "$S_LABELS"
    for label in "${labels[@]}"; do cmd+=("--labels=$label"); done
  fi
  [[ -n "$DRY_RUN" ]] || ensure_venv
  run_step "${cmd[@]}"
}

# Worker settings shared by `flex-template build` (as the template's defaults) and `flex-template run`.
gcloud_environment_flags() {
  ENV_FLAGS=()
  [[ -z "$S_STAGING_LOCATION" ]] || ENV_FLAGS+=("--staging-location=$S_STAGING_LOCATION")
  [[ -z "$S_TEMP_LOCATION" ]] || ENV_FLAGS+=("--temp-location=$S_TEMP_LOCATION")
  [[ -z "$S_SERVICE_ACCOUNT" ]] || ENV_FLAGS+=("--service-account-email=$S_SERVICE_ACCOUNT")
  [[ -z "$S_MACHINE_TYPE" ]] || ENV_FLAGS+=("--worker-machine-type=$S_MACHINE_TYPE")
  [[ -z "$S_NUM_WORKERS" ]] || ENV_FLAGS+=("--num-workers=$S_NUM_WORKERS")
  [[ -z "$S_MAX_WORKERS" ]] || ENV_FLAGS+=("--max-workers=$S_MAX_WORKERS")
  [[ -z "$S_NETWORK" ]] || ENV_FLAGS+=("--network=$S_NETWORK")
  [[ -z "$S_SUBNETWORK" ]] || ENV_FLAGS+=("--subnetwork=$S_SUBNETWORK")
  [[ -z "$S_NO_PUBLIC_IPS" ]] || ENV_FLAGS+=(--disable-public-ips)
  [[ -z "$S_LABELS" ]] || ENV_FLAGS+=("--additional-user-labels=$S_LABELS")
}

cmd_template() {
  resolve_settings project region bucket image
  [[ ${#PASS[@]} -eq 0 ]] || die "template: unexpected argument: ${PASS[0]} (parameters are given to run-template)"
  gcloud_environment_flags
  run_step gcloud dataflow flex-template build "$S_TEMPLATE_FILE" "--project=$S_PROJECT" \
    "--image=$S_IMAGE" --sdk-language=PYTHON "--metadata-file=$METADATA_FILE" ${ENV_FLAGS[@]+"${ENV_FLAGS[@]}"}
}

# PASS (build flags) -> PARAMETERS ("name=value" items, in order of first appearance)
template_parameters() {
  local names=() arg name value has_value i=0 existing
  while [[ $i -lt ${#PASS[@]} ]]; do
    arg="${PASS[$i]}"
    i=$((i + 1))
    [[ "$arg" == --?* ]] || die "run-template: unexpected argument: $arg (template parameters are --name VALUE)"
    name="${arg#--}"
    has_value=""
    if [[ "$name" == *=* ]]; then value="${name#*=}"; name="${name%%=*}"; has_value=1; fi
    [[ "$TEMPLATE_PARAMETERS" == *" $name "* ]] \
      || die "run-template: --$name is not a parameter of the template (see pipeline/flex_template_metadata.json)"
    if [[ -z "$has_value" ]]; then
      if [[ "$name" == overwrite || "$name" == break_lock ]]; then
        value=true
      else
        [[ $i -lt ${#PASS[@]} ]] || die "run-template: --$name needs a value"
        value="${PASS[$i]}"
        i=$((i + 1))
      fi
    fi
    existing="P_$name"
    if [[ " ${names[*]-} " != *" $name "* ]]; then
      names+=("$name")
    elif [[ "$TEMPLATE_LIST_PARAMETERS" == *" $name "* ]]; then
      value="${!existing},$value"
    fi
    printf -v "P_$name" '%s' "$value"
  done
  for name in manifest output_dir name; do
    [[ " ${names[*]-} " == *" $name "* ]] || die "run-template: missing --$name (a required template parameter)"
  done
  PARAMETERS=()
  for name in "${names[@]}"; do existing="P_$name"; PARAMETERS+=("$name=${!existing}"); done
  # The worker image is a Beam pipeline option that the launcher passes on, not a template parameter.
  PARAMETERS+=("sdk_container_image=$S_IMAGE")
}

# gcloud splits --parameters at commas; values with commas need gcloud's ^DELIM^ form (gcloud topic escaping).
parameters_flag() {
  local joined delimiter="," item
  joined="$(printf '%s\n' "${PARAMETERS[@]}")"
  if [[ "$joined" == *,* ]]; then
    for delimiter in '~' ';' '#' '|' '@'; do [[ "$joined" != *"$delimiter"* ]] && break; done
    [[ "$joined" != *"$delimiter"* ]] || die "run-template: parameter values use every delimiter gcloud could split on"
  fi
  local out=""
  for item in "${PARAMETERS[@]}"; do out+="${out:+$delimiter}$item"; done
  if [[ "$delimiter" == , ]]; then echo "--parameters=$out"; else echo "--parameters=^$delimiter^$out"; fi
}

cmd_run_template() {
  resolve_settings project region bucket image
  require_remote_paths
  template_parameters
  gcloud_environment_flags
  local parameters
  parameters="$(parameters_flag)"
  run_step gcloud dataflow flex-template run "$S_JOB_NAME" "--project=$S_PROJECT" "--region=$S_REGION" \
    "--template-file-gcs-location=$S_TEMPLATE_FILE" ${ENV_FLAGS[@]+"${ENV_FLAGS[@]}"} "$parameters"
}

cmd_cloud() {
  COMMAND="$1"
  shift
  parse_cloud_args "$@"
  is_true "${SHARDSMITH_DRY_RUN:-}" && DRY_RUN=true
  CONFIG_FILE="${CONFIG_FILE:-${SHARDSMITH_CONFIG:-}}"
  [[ -z "$CONFIG_FILE" ]] || read_config "$CONFIG_FILE"
  case "$COMMAND" in
    image) cmd_image ;;
    dataflow) cmd_dataflow ;;
    template) cmd_template ;;
    run-template) cmd_run_template ;;
  esac
}

cmd_airflow_env() {
  [[ $# -eq 0 ]] || die "airflow-env takes no arguments (SHARDSMITH_AIRFLOW_VENV sets where it goes)"
  local stamp="$AIRFLOW_VENV/.shardsmith-airflow-installed" want="${AIRFLOW_PACKAGES[*]}"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "launch.sh: $AIRFLOW_VENV is up to date" >&2
    return
  fi
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
    -h|--help|help) usage ;;
    "") usage; exit 2 ;;
    *) usage >&2; die "unknown command: $command" ;;
  esac
}

main "$@"
