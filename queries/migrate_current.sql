SELECT coalesce(max(version), 0) FROM tether_schema_migrations;
