"""Opening a checkpoint: steps 1-11 of the spec's validation order (§15).

Locate the checkpoint (with the R-PUB-13 ``.NAME.oc-old-*`` fallback), open
its container, verify and parse the manifest (steps 3-9, :mod:`.manifest`),
then the inventory (step 10) and every file's size (step 11). A failure
caused by another process replacing the checkpoint meanwhile is retried once
(R-RDR-13). Nothing here decodes a component: that is :mod:`.steps`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from ..container.base import Source, check_locatable, identity, look_beside
from ..container.debris import parse, writer_runs
from ..container.opener import open_source
from ..format.errors import CheckpointError, ConcurrentModification, OutOfDescriptors
from ..format.manifest import MANIFEST_NAME, ParsedManifest, field_of, parse_manifest
from ..rules import raise_if, required
from ..rules.container import CON
from ..rules.v2 import is_shard_file

Understood = Collection[str] | Mapping[str, int]


def open_verified(
    path: Path, understood: Understood, issues: list[CheckpointError] | None, check_files: bool = True,
    defer: bool = False,
) -> tuple[Path, Source, ParsedManifest]:
    """Steps 1-11 for ``path``: where the checkpoint was found, its open source, its parsed manifest.

    ``issues`` receives every further error of the steps that can report several; the first is raised.
    ``check_files=False`` stops after step 9 (manifest and paths). ``defer``: shard data files are opened
    and sized on their first read (:func:`deferred_files`; the read path), not now (``validate``).
    """
    raise_if(CON.check("R-PUB-12", None, path.name, file=str(path)))
    return _open_consistent(path, understood, issues, check_files, defer)


def _raise_first(errors: list[CheckpointError], issues: list[CheckpointError] | None) -> None:
    if errors:
        if issues is not None:
            issues.extend(errors[1:])
        raise errors[0]


def _open_at(
    target: Path,
    understood: Understood,
    issues: list[CheckpointError] | None,
    check_files: bool = True,
    defer: bool = False,
) -> tuple[Source, ParsedManifest]:
    """Steps 1-11 for a path that exists."""
    check_locatable(target)
    source = open_source(target)
    try:
        parsed = parse_and_pin(source, source.read_manifest(), understood, issues, check_files, defer)
    except BaseException:
        source.close()
        raise
    return source, parsed


def parse_and_pin(source: Source, manifest: bytes, understood: Understood, issues: list[CheckpointError] | None,
                  check_files: bool, defer: bool = False) -> ParsedManifest:
    """Steps 3-11 on a manifest read from ``source`` (local or remote): parse it, then (``check_files``)
    check the inventory and pin the files it lists (``defer``: but the shard data files)."""
    parsed = parse_manifest(manifest, understood_extensions=understood, issues=issues)
    if check_files:
        source.deferred = deferred_files(parsed) if defer else frozenset()
        check_inventory(source, parsed, issues)
        # From here on a writer replacing the checkpoint cannot take its files away (R-RDR-14).
        source.pin(parsed.file_paths())
    return parsed


def deferred_files(parsed: ParsedManifest) -> frozenset[str]:
    """The shard data files of the ``tree`` components of kind_version 2 (``components/m/shards/rank-00003.bin``).

    A rank of a sharded load reads a few of them: opening (and sizing) all of them on every rank would cost
    N opens per rank, N² on a shared file system. Their presence is checked with the rest (step 10, from the
    directory listing); their size (step 11) and the descriptor that holds them when they are first read.
    """
    if parsed.written_version < 2:
        return frozenset()
    components = parsed.manifest.components
    return frozenset(rel for rel, (name, key) in parsed.file_paths().items()
                     if is_shard_file(key) and components[name].kind == "tree" and components[name].kind_version == 2)


def _open_once(
    target: Path,
    understood: Understood,
    issues: list[CheckpointError] | None,
    check_files: bool,
    defer: bool = False,
) -> tuple[Path, Source, ParsedManifest]:
    """Steps 1-11 once: the target if it exists, else the R-PUB-13 fallback."""
    if not os.path.exists(target):
        return _open_fallback(target, understood)
    return _open_found(target, understood, issues, check_files, defer)


def _open_found(
    target: Path,
    understood: Understood,
    issues: list[CheckpointError] | None,
    check_files: bool = True,
    defer: bool = False,
) -> tuple[Path, Source, ParsedManifest]:
    """Steps 1-11 for a name just found present. A failure after which the name is gone is a race, whatever
    it resolved to before the attempt (a writer may have renamed in and moved aside again in between):
    :class:`ConcurrentModification`, which :func:`_open_consistent` retries."""
    try:
        return (target, *_open_at(target, understood, issues, check_files, defer))
    except (CheckpointError, OSError) as exc:
        if isinstance(exc, ConcurrentModification) or os.path.lexists(target):
            raise
        raise replaced_while_opening(target, f"another process moved the checkpoint away while it was being "
                                     f"opened ({exc})") from None


def replaced_while_opening(target: Path, how: str) -> CheckpointError:
    """R-RDR-13: opening failed because another process replaced the checkpoint meanwhile (a race, not a
    defect of the file): retried once by :func:`_open_consistent`, reported as it is after that."""
    return CON.error("R-RDR-13", how, file=str(target))


def _open_consistent(
    target: Path,
    understood: Understood,
    issues: list[CheckpointError] | None,
    check_files: bool,
    defer: bool = False,
) -> tuple[Path, Source, ParsedManifest]:
    """Open ``target``; if it failed because another process replaced the checkpoint meanwhile, once more.

    A failure counts as a race when the name resolves to another entry (or to nothing, or to something)
    after the attempt than before it (:func:`identity`): a writer published over it, so the checkpoint
    that was being read may have been deleted half-way. The retry reads the new, complete checkpoint
    (R-RDR-13). If that races too, :class:`ConcurrentModification` says so; an error with the name
    unchanged is the checkpoint's own and is raised as it is.
    """
    for attempt in range(2):
        before = identity(target)
        found: list[CheckpointError] | None = [] if issues is not None else None
        try:
            return _open_once(target, understood, found, check_files, defer)
        except CheckpointError as exc:
            error: CheckpointError = exc
        except OSError as exc:  # an unforeseen race still never escapes as a raw OSError
            error = required(CON.check("R-CON-3", None, failure=exc, file=str(exc.filename or target)))
        if identity(target) == before and not isinstance(error, ConcurrentModification):
            if issues is not None and found:
                issues.extend(found)
            raise error
        if attempt:
            raise replaced_while_opening(target, f"another process replaced or is writing the checkpoint while it "
                                         f"was being opened, twice in a row; the last attempt failed with {error}"
                                         ) from None
    raise AssertionError("unreachable")  # pragma: no cover  (the loop returns or raises)


#: Errors of one rule reported one by one by the inventory; the rest are counted in one more error,
#: so a manifest listing a million absent files costs a million lookups, not a million error objects.
REPORTED_PER_RULE = 100


def check_inventory(source: Source, parsed: ParsedManifest, issues: list[CheckpointError] | None) -> None:
    """Step 10 (entry types, listed files present, unlisted files, archive members) and step 11 (sizes)."""
    files, errors, rejected = source.inventory()
    listed = parsed.file_paths()

    def under_rejected(rel: str) -> bool:
        return any(rel == bad or rel.startswith(bad + "/") for bad in rejected)

    missing = 0
    for rel, (component, key) in listed.items():
        if rel not in files and not under_rejected(rel):
            missing += 1
            if missing <= REPORTED_PER_RULE:
                errors.append(required(CON.check("R-CON-3", field_of("components", component, "files", key),
                                                 "absent (or not a regular file)", file=rel)))
    if missing > REPORTED_PER_RULE:
        errors.append(required(CON.check("R-CON-3", "$.components", more=missing - REPORTED_PER_RULE,
                                         file=str(source.path))))
    extra = 0
    for rel in files:
        if rel != MANIFEST_NAME and rel not in listed:
            extra += 1
            if extra <= REPORTED_PER_RULE:
                errors.append(required(CON.check("R-CON-2", None, 1, file=rel)))
    if extra > REPORTED_PER_RULE:
        errors.append(required(CON.check("R-CON-2", None, extra - REPORTED_PER_RULE, file=str(source.path))))
    _raise_first(errors, issues)
    components = parsed.manifest.components
    for rel, (component, key) in listed.items():
        if files[rel] < 0:  # a deferred file: sized when first opened
            continue
        error = CON.check("R-CHK-6", field_of("components", component, "files", key, "size"), files[rel],
                          components[component].files[key].size, file=rel)
        if error is not None:
            errors.append(error)
    _raise_first(errors, issues)


def _moved_by_running_writer(path: Path) -> bool:
    """Whether the old copy ``path`` was moved aside by a process of this machine that still runs."""
    entry = parse(path)
    return entry is not None and writer_runs(entry)


def _open_fallback(
    target: Path, understood: Understood
) -> tuple[Path, Source, ParsedManifest]:
    """R-PUB-13 / R-PUB-14: read the one ``.NAME.oc-old-*`` entry that opens cleanly.

    The name was empty a moment ago. What stands at and beside it is taken from one directory listing
    (:func:`look_beside`): a writer moving a checkpoint aside keeps the name or its old copy in place at every
    instant, so a listing with neither means nothing was published then (R-PUB-10), never that two saves
    passed between two looks. If no old copy opens and a second listing differs from the first, a writer
    replaced the checkpoint meanwhile (its old copy deleted as it was read): :class:`ConcurrentModification`,
    which :func:`_open_consistent` retries (R-RDR-13). So are several whole copies while a save that moved
    one aside still runs (two saves overlapping, §12.6); R-PUB-14's NotACheckpoint is for leftovers.
    """
    first = look_beside(target)
    if first.present:  # the replacement completed since the name was looked at
        return _open_found(target, understood, None)
    if not first.old_copies:
        hint = f" (another process is writing a checkpoint here: {first.writers[0]})" if first.writers else ""
        raise required(CON.check("R-PUB-10", None, False, f"no such file or directory{hint}", file=str(target)))
    opened: list[tuple[Path, Source, ParsedManifest]] = []
    for candidate in first.old_copies:
        try:
            opened.append((candidate, *_open_at(candidate, understood, None)))
        except OutOfDescriptors:
            for _, source, _ in opened:
                source.close()
            raise
        except CheckpointError:
            continue
    if len(opened) == 1:
        return opened[0]
    for _, source, _ in opened:
        source.close()
    second = look_beside(target)
    if second.present:
        return _open_found(target, understood, None)
    if second.old_copies != first.old_copies:
        raise replaced_while_opening(target, "another process moved the checkpoint aside and replaced it while it "
                                     "was being opened")
    if len(opened) > 1 and any(_moved_by_running_writer(path) for path, _, _ in opened):
        # Two saves without an atomic exchange overlapped (one moved the other's new checkpoint aside before
        # the other deleted its old copy): a race in progress, not two leftovers of ended writers (R-PUB-14).
        raise replaced_while_opening(target, f"{len(opened)} whole copies of it were moved aside by saves still "
                                     "running")
    raise CON.error("R-PUB-14", f"the path does not exist and {len(opened)} of {len(first.old_copies)} "
                    f"'.{target.name}.oc-old-*' entries open cleanly (exactly one must)", file=str(target))
