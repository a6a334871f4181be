-- tether schema v13: the two events every job has, claimed and running, are
-- columns of the jobs row written by the claim and the running write (which
-- update that row anyway, HOT since v12), not rows of their own: two fewer
-- inserts per job. Their ids are still taken from job_events' sequence when
-- they happen, so the timeline keeps its order, and job_timeline shows them
-- with the event rows exactly as before. The columns hold the latest claim
-- of the job; the claim that replaces them first stores them as event rows
-- (claim.sql), so an earlier attempt's or lease's keep their place.
ALTER TABLE jobs
    ADD COLUMN claim_event_id   bigint,
    ADD COLUMN claim_at         timestamptz,
    ADD COLUMN claim_agent      text,
    ADD COLUMN claim_generation text,
    ADD COLUMN claim_lease      bigint,
    ADD COLUMN claim_message    text,
    ADD COLUMN running_event_id bigint,
    ADD COLUMN running_at       timestamptz,
    ADD COLUMN running_message  text;

-- A job's timeline: its event rows and its latest claim's two events.
CREATE VIEW job_timeline AS
    SELECT id, job_id, at, kind, agent, generation, lease, message FROM job_events
    UNION ALL
    SELECT claim_event_id, id, claim_at, 'claimed', claim_agent, claim_generation, claim_lease, claim_message
    FROM jobs WHERE claim_event_id IS NOT NULL
    UNION ALL
    SELECT running_event_id, id, running_at, 'running', claim_agent, claim_generation, claim_lease, running_message
    FROM jobs WHERE running_event_id IS NOT NULL;
