-- tether schema v14: a log chunk has an identity, so a write whose
-- acknowledgement was lost can be sent again without storing its lines
-- twice. Each runner (one job under one lease) numbers its chunks 1, 2, …
-- in write order; the active row remembers the highest number stored under
-- which lease (log_lease, log_seq), and log_append.sql stores only chunks
-- above it. A hung server that wakes up and commits a flush the agent had
-- given up on makes the agent's resend a no-op, whichever runs first.
-- Adding columns with constant defaults rewrites nothing (PostgreSQL ≥ 11).
ALTER TABLE active_jobs
    ADD COLUMN log_lease bigint,
    ADD COLUMN log_seq   bigint NOT NULL DEFAULT 0;
