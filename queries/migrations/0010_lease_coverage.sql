-- tether schema v10: a heartbeat renews the agent, not each lease. A lease
-- held by an agent's current generation is as fresh as that agents row's
-- last_seen (janitor_candidates.sql), so a heartbeat writes one row however
-- many jobs the agent holds. A lease the process does not know it holds (the
-- answer of its claim was lost, say) is detached by its heartbeat: from then
-- on only its own last_heartbeat (the claim time) speaks for it, and the
-- janitor's offline_after/stale_job rules run on it as before.
ALTER TABLE active_jobs ADD COLUMN detached boolean NOT NULL DEFAULT false;
