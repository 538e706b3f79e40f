"""Google Cloud credentials, checked before Beam starts for a build that needs them: one on Dataflow, or one that
reads or writes gs:// paths (unless STORAGE_EMULATOR_HOST points Google's clients at a local emulator, which
they use anonymously).

Without credentials Beam's clients retry their lookup with backoff and then fail on the first file they touch:
measured, 4 minutes of retry tracebacks ending in `BeamIOError: Match operation failed`, blaming the manifest.
The check here follows google.auth.default()'s order without its waits: GOOGLE_APPLICATION_CREDENTIALS, then
gcloud's application-default file (both loaded, offline, so that a broken file is named), then a metadata server
(Compute Engine, GKE, Cloud Run: where Dataflow's Flex Template launcher runs), recognised from the machine's
product name or asked once with a short deadline; NO_GCE_CHECK=true skips that question, as for google.auth.

A build that reads or writes s3:// paths needs AWS credentials, found as boto3 finds them (environment, shared
files, a role): without any, a usage error naming the fix instead of botocore's NoCredentialsError traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipeline.running.runner_names import REMOTE_RUNNERS, beam_flag, runner_name
from shardsmith.storage import is_cloud_storage
from shardsmith.storage.s3_objects import has_credentials, is_s3

FIX = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service account "
       "key file")
METADATA_DEADLINE_S = 1.0
_PRODUCT_NAME_FILE = "/sys/class/dmi/id/product_name"  # "Google Compute Engine" on Google's machines


def credentials_needed_for(beam_args: list[str], manifests: tuple[str, ...], output_dir: str,
                           temp_dir: str | None, environ: Mapping[str, str]) -> str | None:
    """What makes the build talk to Google Cloud, in words (a Dataflow runner, or the first gs:// manifest,
    output, --temp_dir or --temp_location), or None: a local build of local files, or one against a storage
    emulator."""
    if environ.get("STORAGE_EMULATOR_HOST"):
        return None
    runner = beam_flag(beam_args, "runner")
    if runner_name(runner) in REMOTE_RUNNERS:
        return f"--runner={runner}"
    paths = (*manifests, output_dir, temp_dir or "", beam_flag(beam_args, "temp_location") or "")
    return next((path for path in paths if is_cloud_storage(path)), None)


AWS_FIX = ("run `aws configure`, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); a server "
           "other than AWS is named by AWS_ENDPOINT_URL")


def aws_credentials_needed_for(paths: tuple[str, ...]) -> str | None:
    """The first s3:// path among `paths`, or None."""
    return next((path for path in paths if path and is_s3(path)), None)


def aws_credentials_problem(needed_for: str) -> str | None:
    """None if boto3 finds AWS credentials (it may ask an instance's metadata service, briefly), else the
    one-line reason and the fix."""
    try:
        found = has_credentials()
    except Exception as e:  # a broken profile or credentials file
        return f"AWS credentials cannot be used ({' '.join(str(e).split())[:200]}): {AWS_FIX}"
    return None if found else f"no AWS credentials found, which {needed_for} needs: {AWS_FIX}"


def credentials_problem(needed_for: str, environ: Mapping[str, str] | None = None) -> str | None:
    """None if google.auth.default() would find credentials, else the one-line reason and the fix. Reads files
    only, except one metadata-server question of at most METADATA_DEADLINE_S (none with NO_GCE_CHECK=true)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        if not os.path.isfile(explicit):
            return f"GOOGLE_APPLICATION_CREDENTIALS names {explicit}, which is not a file: {FIX}"
        return _unusable(explicit)
    gcloud_file = os.path.join(_gcloud_config_dir(environ), "application_default_credentials.json")
    if os.path.isfile(gcloud_file):
        return _unusable(gcloud_file)
    if environ.get("NO_GCE_CHECK", "").lower() != "true" and (_google_machine() or _metadata_server_answers(environ)):
        return None
    return f"no Google Cloud credentials found, which {needed_for} needs: {FIX}"


def _unusable(path: str) -> str | None:
    from google.auth import exceptions, load_credentials_from_file

    try:
        load_credentials_from_file(path)
    except exceptions.GoogleAuthError as e:
        return f"{path} cannot be used as Google Cloud credentials ({' '.join(str(e).split())[:200]}): {FIX}"
    return None


def _gcloud_config_dir(environ: Mapping[str, str]) -> str:
    """gcloud's configuration folder, as google.auth finds it (CLOUDSDK_CONFIG, else ~/.config/gcloud)."""
    if environ.get("CLOUDSDK_CONFIG"):
        return environ["CLOUDSDK_CONFIG"]
    if os.name == "nt":
        return os.path.join(environ.get("APPDATA", ""), "gcloud")
    return os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config", "gcloud")


def _google_machine() -> bool:
    try:
        with open(_PRODUCT_NAME_FILE) as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return False


def _metadata_server_answers(environ: Mapping[str, str]) -> bool:
    import urllib.error
    import urllib.request

    host = environ.get("GCE_METADATA_HOST") or environ.get("GCE_METADATA_IP") or "169.254.169.254"
    request = urllib.request.Request(f"http://{host}/", headers={"Metadata-Flavor": "Google"})
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the link-local server, never a proxy
        with opener.open(request, timeout=METADATA_DEADLINE_S) as response:
            return response.headers.get("Metadata-Flavor") == "Google"
    except (OSError, ValueError, urllib.error.URLError):
        return False
