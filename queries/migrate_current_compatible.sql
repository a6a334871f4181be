-- The highest compatible migration applied (see migrate_create_compatible_table.sql).
SELECT coalesce(max(version), 0) FROM tether_schema_compatible_migrations;
