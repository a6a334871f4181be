-- tether schema v1: jobs, their leases, agents, events and logs.
-- Every timestamp comes from the database clock (now()).

CREATE TABLE agents (
    name        text PRIMARY KEY,
    generation  text        NOT NULL,           -- random per process start
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    state       text        NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'draining', 'stopped')),
    version     text        NOT NULL DEFAULT '',
    capacity    integer     NOT NULL CHECK (capacity > 0),
    commands    text[]      NOT NULL DEFAULT '{}',
    plugins     jsonb       NOT NULL DEFAULT '{}' -- plugin name -> {"version", "capabilities"}
);

CREATE TABLE jobs (
    id              text PRIMARY KEY,            -- UUIDv7: sorts by creation
    command         text        NOT NULL,
    plugin          text        NOT NULL,
    status          text        NOT NULL
                    CHECK (status IN ('queued', 'accepted', 'running', 'canceling',
                                      'succeeded', 'failed', 'canceled')),
    context         jsonb       NOT NULL DEFAULT '{}',
    attempt         integer     NOT NULL DEFAULT 1,
    error           text,
    error_class     text,
    result          jsonb,
    submitter       text        NOT NULL DEFAULT '',
    idempotency_key text UNIQUE,
    request_hash    text,                         -- of the submit body, for idempotency
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz
);

-- Listing filters; id is the keyset cursor.
CREATE INDEX jobs_status_id    ON jobs (status, id);
CREATE INDEX jobs_command_id   ON jobs (command, id);
CREATE INDEX jobs_submitter_id ON jobs (submitter, id);

-- One row per non-terminal job: who holds it and under which lease.
CREATE TABLE active_jobs (
    job_id           text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    command          text        NOT NULL,       -- copied from jobs for the claim filter
    agent_name       text,                       -- NULL = claimable
    agent_generation text,
    lease            bigint      NOT NULL DEFAULT 0, -- fencing token, +1 on every change of holder
    last_heartbeat   timestamptz,
    claimed_at       timestamptz,
    released_at      timestamptz,
    release_reason   text,
    run_after        timestamptz NOT NULL DEFAULT now(),
    handle           bytea,                      -- the plugin's checkpoint
    stdout_bytes     bigint      NOT NULL DEFAULT 0,
    stderr_bytes     bigint      NOT NULL DEFAULT 0,
    stdout_truncated boolean     NOT NULL DEFAULT false,
    stderr_truncated boolean     NOT NULL DEFAULT false
);

-- Claim: unowned rows in run_after order.
CREATE INDEX active_jobs_claimable ON active_jobs (run_after, job_id) WHERE agent_name IS NULL;
-- Heartbeat and restart handling: the rows one agent holds.
CREATE INDEX active_jobs_agent ON active_jobs (agent_name) WHERE agent_name IS NOT NULL;

CREATE TABLE job_events (
    id         bigserial PRIMARY KEY,
    job_id     text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL,
    agent      text,
    generation text,
    lease      bigint,
    message    text        NOT NULL DEFAULT ''
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE job_logs (
    id     bigserial PRIMARY KEY,                 -- global order doubles as the per-job seq
    job_id text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    stream text        NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    at     timestamptz NOT NULL DEFAULT now(),
    data   bytea       NOT NULL
);
CREATE INDEX job_logs_job ON job_logs (job_id, stream, id);
