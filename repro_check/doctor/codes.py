"""The doctor's codes, as the doctor package names them: they live in
:mod:`repro_check.doctor_codes`, below :mod:`repro_check.config` (which checks the codes a
``[tool.repro-check.doctor]`` table silences), so that the doctor can read the config."""

from __future__ import annotations

from repro_check.doctor_codes import CODES, Code, parse_codes

__all__ = ["CODES", "Code", "parse_codes"]
