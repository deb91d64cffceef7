//! Git snapshots at a pinned commit (filled in by the snapshot loader work).
