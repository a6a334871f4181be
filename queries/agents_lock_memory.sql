-- Store the liveness check's first-free memory (schema v16), in the check's
-- transaction, after liveness_turn.sql: for each agent generation in the
-- arrays, when its name lock was first seen free and whether it was found
-- dead; every other row's memory is cleared (its lock is held again, it
-- stopped, or the memory was void). Only rows whose memory changes are
-- written. @due_at is when the next check may find an agent dead (NULL:
-- none pending); the agent that ticks first after it takes the turn.
WITH m AS (
    SELECT * FROM unnest(@names::text[], @generations::text[], @since::timestamptz[], @dead::bool[])
        AS m (name, generation, since, dead)
), kept AS (
    UPDATE agents g SET lock_free_since = m.since, lock_found_dead = m.dead
    FROM m
    WHERE g.name = m.name AND g.generation = m.generation
      AND (g.lock_free_since IS DISTINCT FROM m.since OR g.lock_found_dead IS DISTINCT FROM m.dead)
    RETURNING 1
), cleared AS (
    UPDATE agents g SET lock_free_since = NULL, lock_found_dead = false
    WHERE g.lock_free_since IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM m WHERE m.name = g.name AND m.generation = g.generation)
    RETURNING 1
)
UPDATE liveness_turn SET due_at = @due_at
WHERE id
RETURNING (SELECT count(*) FROM kept)::int, (SELECT count(*) FROM cleared)::int;
