"""Why runs diverge: the diagnosis, op-level localization and the seeding ablation."""
