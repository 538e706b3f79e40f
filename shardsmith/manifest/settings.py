"""How a manifest is read, whatever its format: ManifestFormat (column names, path rewrites, allowed prefixes, task
and features), and a row's image URI resolved with it."""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass, fields

from shardsmith.format.naming import is_remote
from shardsmith.settings import ManifestSettings


@dataclass(frozen=True)
class ManifestFormat(ManifestSettings):
    """How to read a manifest: column names, the task, features and optional URI prefix rewrites (OLD, NEW).
    Its fields and their defaults are the flags declared on ManifestSettings (shardsmith/settings/__init__.py);
    `allowed_prefixes` each end with "/", local ones real paths; empty means anywhere."""

    @classmethod
    def from_recorded(cls, recorded: dict) -> ManifestFormat:
        """The format a build read its manifests with, from the options recorded in its metadata.json (see
        pipeline/options/build_options.py BuildOptions.recorded); fields a build did not record keep their defaults."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in recorded.items() if key in known}
        for key in ("path_map", "features"):
            if key in values:
                values[key] = tuple(tuple(pair) for pair in values[key])
        if "allowed_prefixes" in values:
            values["allowed_prefixes"] = tuple(values["allowed_prefixes"])
        return cls(**values)

    @property
    def annotated(self) -> bool:
        """Whether rows carry more than one label (an Annotation)."""
        return self.task != "classification" or bool(self.features)

    def allows(self, resolved_uri: str) -> bool:
        """Whether a resolved URI lies under an allowed prefix. A local path is compared by its real path (every
        symlink and `..` resolved, as opening it would), so neither a symlink nor `..` leads out of a prefix; a
        remote URI with a `..` segment is never allowed. Only names are looked at, never a file's content, so
        the answer is the same whether the target exists or not."""
        if not self.allowed_prefixes:
            return True
        if is_remote(resolved_uri):
            if ".." in resolved_uri.split("/"):
                return False
        else:
            resolved_uri = os.path.realpath(resolved_uri)
        return any(resolved_uri.startswith(prefix) for prefix in self.allowed_prefixes)


def resolve_uri(uri: str, base_dir: str, fmt: ManifestFormat) -> str:
    """Applies the first matching --path_map prefix, then resolves a relative path against `base_dir`."""
    for old, new in fmt.path_map:
        if uri.startswith(old):
            uri = new + uri[len(old):]
            break
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if is_remote(uri) or uri.startswith("/"):
        return uri
    base = base_dir.rstrip("/")
    if is_remote(base):
        return f"{base}/{uri}"
    joined_base = _normalized_base(base_dir)
    if joined_base and "/." not in "/" + uri and "//" not in uri and not uri.endswith("/"):
        return f"{joined_base}/{uri}"  # what normpath would make of it, without its cost (1 us a row)
    return posixpath.normpath(posixpath.join(base, uri))


@functools.lru_cache(maxsize=64)
def _normalized_base(base_dir: str) -> str:
    """`base_dir` as normpath writes it, to which a relative URI with no "", "." or ".." segment (none starting with
    "."), joined by "/", is already normal; "" for a base where that does not hold ("", ".", "/", "//...")."""
    normal = posixpath.normpath(base_dir)
    return "" if normal in (".", "/") or normal.startswith("//") or not base_dir else normal
