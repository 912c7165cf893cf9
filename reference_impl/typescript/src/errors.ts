/**
 * Error classes of spec Table 16-1, all under one root `CheckpointError` (R-ERR-3).
 *
 * Each error carries the file concerned (a path inside the checkpoint, or the
 * checkpoint path itself), the field concerned and the requirement ID, so the
 * one-line message of the protocol (R-RDR-12) names all three.
 */

export class CheckpointError extends Error {
  /** Class name of Table 16-1 (stable even when minified). */
  readonly errorClass: string = "CheckpointError";
  constructor(
    readonly file: string,
    readonly field: string,
    readonly detail: string,
    readonly rule: string,
  ) {
    super(`${file}: ${field}: ${detail}${rule ? ` [${rule}]` : ""}`);
  }
}

function errorClass(name: string): typeof CheckpointError {
  // One subclass per class of Table 16-1; `name` survives bundling and minifying.
  const cls = class extends CheckpointError {
    override readonly errorClass: string = name;
  };
  Object.defineProperty(cls, "name", { value: name });
  return cls;
}

export const NotACheckpoint = errorClass("NotACheckpoint");
export const UnsupportedVersion = errorClass("UnsupportedVersion");
export const UnsupportedExtension = errorClass("UnsupportedExtension");
export const ManifestError = errorClass("ManifestError");
export const IntegrityError = errorClass("IntegrityError");
export const UnsafePath = errorClass("UnsafePath");
export const MissingFile = errorClass("MissingFile");
export const ExtraFile = errorClass("ExtraFile");
export const LimitExceeded = errorClass("LimitExceeded");
export const TreeError = errorClass("TreeError");
export const ArrayLayoutError = errorClass("ArrayLayoutError");
export const UnknownDtype = errorClass("UnknownDtype");
export const ArchiveError = errorClass("ArchiveError");
export const UnknownComponentKind = errorClass("UnknownComponentKind");
export const IncompatibleComponent = errorClass("IncompatibleComponent");

export type ErrorClass = typeof CheckpointError;
