SELECT to_regclass('tether_schema_compatible_migrations') IS NOT NULL;
