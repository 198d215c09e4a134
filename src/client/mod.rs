//! Pure client logic (no `view!`), unit-tested natively: later the pending-owner resolver (N1),
//! the revision merge (P9) and the selection generation guard (N2).
