-- Run under migrate_lock: concurrent CREATE TABLE IF NOT EXISTS can race.
CREATE TABLE IF NOT EXISTS tether_schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
