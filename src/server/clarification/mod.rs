//! Asking and answering (L6–L19): ask, waiters, detach/expiry, respond (claim, deliver,
//! restore), crash recovery. Arrives with the agents and answering issues; the guarded SQL it
//! will call already lives in `repo::authority`.
