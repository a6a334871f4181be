-- Run under migrate_lock, after migrate_create_table. The compatible
-- migrations (queries.Migration.Compatible) are recorded here, not in
-- tether_schema_migrations: an agent reads the schema version from that
-- table alone (agents before this table, too) and refuses a database newer
-- than it knows, so a migration older agents run on must not raise it.
CREATE TABLE IF NOT EXISTS tether_schema_compatible_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
