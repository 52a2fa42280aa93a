"""What both processes know of diagnose's pins: the variable that names a pair's plan, and the
names of the files a pinned run writes in its replay folder (:mod:`repro_check.child.seeding.pin`
writes them, :mod:`repro_check.diagnose.sources` reads them)."""

from __future__ import annotations

#: the variable naming the pair's plan (a JSON file)
PLAN_VAR = "REPRO_CHECK_PINS"
#: the file of a run's generator and reseeding records, in the replay folder
RECORDS = "generators-{run}.jsonl"


def rank_file(file: str, rank: int | None) -> str:
    """A replay file's name for a torchrun rank (``x-1.jsonl`` stays for rank 0 and single
    runs; ``x-1.rank-2.jsonl`` for rank 2): the ranks of a run share its replay folder."""
    if not rank:
        return file
    stem, dot, ext = file.partition(".")
    return f"{stem}.rank-{rank}{dot}{ext}"
