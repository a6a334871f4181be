SELECT to_regclass('tether_schema_migrations') IS NOT NULL;
