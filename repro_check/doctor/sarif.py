"""``repro-check doctor --sarif PATH``: the findings as SARIF 2.1.0, for GitHub code scanning
and editors.

One rule per code of :data:`~repro_check.doctor_codes.CODES` (its title, why and fix, and where
docs/doctor-codes.md documents it), one result per finding left after silencing, at its file and
lines; paths relative to the folder doctor ran in (``%SRCROOT%``), as GitHub expects them.
Silenced findings are written as results with an accepted suppression, so a code-scanning view
can show what a comment or the configuration hides.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from repro_check.doctor.checkup import DoctorReport, Finding
from repro_check.doctor_codes import CODES, Code, DOCS_PAGE
from repro_check.version import __version__

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: SARIF's kinds of suppression, by what silenced a finding
SUPPRESSION_KINDS = {"comment": "inSource", "option": "external", "config": "external"}
SRCROOT = "%SRCROOT%"


def _rule(code: Code) -> dict[str, Any]:
    return {
        "id": code.code,
        "name": "".join(w[:1].upper() + w[1:]
                        for w in re.sub(r"[^0-9A-Za-z]+", " ", code.title).split()),
        "shortDescription": {"text": code.title},
        "fullDescription": {"text": code.why},
        "help": {
            "text": f"{code.why}\n\nFix: {code.fix}\n\nSee {DOCS_PAGE} ({code.code}).",
            "markdown": f"**{code.code}: {code.title}**\n\n{code.why}\n\n**Fix:** {code.fix}\n\n"
                        f"See [{DOCS_PAGE}]({DOCS_PAGE}) for every code.",
        },
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["reproducibility", "determinism"], "docs": DOCS_PAGE},
    }


def _uri(file: str) -> str:
    """A URI reference relative to %SRCROOT% when the file is inside it, else a file URI."""
    path = Path(file)
    if path.is_absolute():
        return path.as_uri()
    return path.as_posix()


def _result(f: Finding, index: dict[str, int], suppressed_by: str | None) -> dict[str, Any]:
    location: dict[str, Any] = {"uri": _uri(f.file)}
    if not Path(f.file).is_absolute():
        location["uriBaseId"] = SRCROOT
    out: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": "warning",
        "message": {"text": f"{f.message}. Fix: {f.fix}"},
        "locations": [{"physicalLocation": {
            "artifactLocation": location,
            "region": {"startLine": f.line, "endLine": max(f.end_line, f.line)},
        }}],
        # stable when lines move: the code, the file and the message without line numbers
        "partialFingerprints": {"reproCheck/v1": f"{f.code}:{f.file}:"
                                                 f"{re.sub(r' [(]line [0-9]+[)]', '', f.message)}"},
    }
    if suppressed_by is not None:
        out["suppressions"] = [{"kind": SUPPRESSION_KINDS.get(suppressed_by, "external"),
                                "justification": f"silenced by {suppressed_by}"}]
    return out


def sarif_log(report: DoctorReport, root: Path | None = None) -> dict[str, Any]:
    """The SARIF log of a doctor report; ``root``: the folder relative paths start from."""
    base = (root or Path.cwd()).resolve()
    index = {code: i for i, code in enumerate(CODES)}
    results = [_result(f, index, None) for f in report.findings]
    results += [_result(f, index, by) for f, by in report.silenced]
    notes = [{"level": "warning", "message": {"text": w}} for w in report.warnings]
    notes += [{"level": "note", "message": {"text": f"skipped {s['file']}: {s['reason']}"}}
              for s in report.skipped]
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "repro-check",
            "semanticVersion": __version__,
            "version": __version__,
            "rules": [_rule(code) for code in CODES.values()],
        }},
        "originalUriBaseIds": {SRCROOT: {"uri": base.as_uri() + "/"}},
        "results": results,
        "invocations": [{"executionSuccessful": True,
                         "toolExecutionNotifications": notes}],
        "properties": {"targets": list(report.targets), "files": list(report.files)},
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def sarif_text(report: DoctorReport) -> str:
    return json.dumps(sarif_log(report), indent=2) + "\n"
